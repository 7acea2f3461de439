export function seconds(value: number | null | undefined, digits = 1): string {
  return value === null || value === undefined ? "–" : `${value.toFixed(digits)} s`;
}

export function since(iso: string | null | undefined, now: number): string {
  if (!iso) return "–";
  return seconds(Math.max(0, now - Date.parse(iso) / 1000));
}

export function until(iso: string | null | undefined, now: number): string {
  if (!iso) return "–";
  const left = Date.parse(iso) / 1000 - now;
  return left >= 0 ? `${left.toFixed(1)} s left` : `expired ${(-left).toFixed(1)} s ago`;
}

export function num(value: number | null | undefined, digits = 0): string {
  return value === null || value === undefined ? "–" : value.toLocaleString("en", { maximumFractionDigits: digits });
}

export function time(iso: string): string {
  return iso.slice(11, 23);
}
