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
      scales: { x: { time: true } },
      series: [{}, ...lines.map((l) => ({
        label: l.label, stroke: l.color, width: 1.5, spanGaps: true,
        ...(stepped ? { paths: uPlot.paths.stepped!({ align: 1 }) } : {}),
      }))],
      axes: [{}, { size: 50 }],
    };
    plot.current = new uPlot(opts, data, box.current!);
    frame(plot.current, data);
    return () => plot.current?.destroy();
  }, [title, lines.length]);
  useEffect(() => {
    if (!plot.current) return;
    plot.current.setData(data);
    frame(plot.current, data);
  }, [data]);
  return <div class="chart" ref={box} data-testid={`chart-${title}`} />;
}

const MIN_SPAN_S = 120;

/** At least two minutes of time axis, ending at the newest point: with one point (or a
 *  few seconds of them) uPlot's own fit would span years or milliseconds. */
function frame(plot: uPlot, data: AlignedData): void {
  const xs = data[0] as number[];
  if (!xs.length) return;
  const last = xs[xs.length - 1];
  const first = Math.min(xs[0], last - MIN_SPAN_S);
  plot.setScale("x", { min: first, max: last + (last - first) * 0.02 });
}
