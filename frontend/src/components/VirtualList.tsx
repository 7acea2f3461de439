import type { ComponentChildren } from "preact";
import { useLayoutEffect, useRef, useState } from "preact/hooks";

interface Props<T> {
  items: T[];
  rowHeight: number;
  height: number;
  row: (item: T, index: number) => ComponentChildren;
  header?: ComponentChildren;
  follow?: boolean; // keep the view at the bottom while it is there (a log's tail)
  testId?: string;
}

const OVERSCAN = 8;

/** Renders only the rows in view (fixed row height), so 1,000 agents or 20,000 events
 *  cost a screenful of DOM nodes. */
export function VirtualList<T>({ items, rowHeight, height, row, header, follow, testId }: Props<T>) {
  const box = useRef<HTMLDivElement>(null);
  const [top, setTop] = useState(0);
  const atBottom = useRef(true);

  // After every render (a capped log keeps its length while its rows change), stay at
  // the tail if the reader was there.
  useLayoutEffect(() => {
    const el = box.current;
    if (follow && el && atBottom.current) {
      el.scrollTop = el.scrollHeight;
      if (el.scrollTop !== top) setTop(el.scrollTop);
    }
  });

  const first = Math.max(0, Math.floor(top / rowHeight) - OVERSCAN);
  const last = Math.min(items.length, Math.ceil((top + height) / rowHeight) + OVERSCAN);
  const visible = items.slice(first, last);
  return (
    <div class="vlist" data-testid={testId}>
      {header}
      <div class="vlist-body" ref={box} style={{ height: `${height}px` }}
           onScroll={(e) => {
             const el = e.currentTarget as HTMLDivElement;
             atBottom.current = el.scrollTop + el.clientHeight >= el.scrollHeight - rowHeight;
             setTop(el.scrollTop);
           }}>
        <div style={{ height: `${items.length * rowHeight}px`, position: "relative" }}>
          <div style={{ position: "absolute", top: `${first * rowHeight}px`, left: 0, right: 0 }}>
            {visible.map((item, i) => row(item, first + i))}
          </div>
        </div>
      </div>
    </div>
  );
}
