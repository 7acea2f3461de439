import { useEffect, useRef } from "preact/hooks";
import uPlot, { type AlignedData, type Options } from "uplot";
import "uplot/dist/uPlot.min.css";

export interface Line {
  label: string;
  color: string;
}

interface Props {
  title: string;
  lines: Line[];
  data: AlignedData; // [times (s), ...one array per line]
  width?: number;
  height?: number;
  stepped?: boolean;
}

/** One uPlot time chart; created once, fed new data in place. */
export function TimeChart({ title, lines, data, width = 520, height = 200, stepped }: Props) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  useEffect(() => {
    const opts: Options = {
      title, width, height,
      // One point (or none) would make uPlot span years; show a minute around it instead.
      scales: { x: { time: true, range: (_u, min, max) => (min === max ? [min - 30, max + 30] : [min, max]) } },
      series: [{}, ...lines.map((l) => ({
        label: l.label, stroke: l.color, width: 1.5, spanGaps: true,
        ...(stepped ? { paths: uPlot.paths.stepped!({ align: 1 }) } : {}),
      }))],
      axes: [{}, { size: 50 }],
    };
    plot.current = new uPlot(opts, data, box.current!);
    return () => plot.current?.destroy();
  }, [title, lines.length]);
  useEffect(() => { plot.current?.setData(data); }, [data]);
  return <div class="chart" ref={box} data-testid={`chart-${title}`} />;
}
