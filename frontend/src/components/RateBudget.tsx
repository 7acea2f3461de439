import type { RateLimit } from "../api/queries";
import { num, until } from "../format";

/** Requests and tokens available now, the AIMD factor, and a pause if one is on. */
export function RateBudget({ rate, now }: { rate: RateLimit; now: number | null }) {
  const paused = rate.pausedUntil && (now === null || Date.parse(rate.pausedUntil) / 1000 > now);
  return (
    <section class="panel" data-testid="rate-budget">
      <h2>Rate budget</h2>
      <div class="meters">
        <Meter label="requests" value={rate.availableRequests} max={rate.rpm} unit="/min" />
        <Meter label="tokens" value={rate.availableTokens} max={rate.tpm} unit="/min" />
      </div>
      <p>
        AIMD factor <b data-testid="rate-factor">{rate.rateFactor.toFixed(2)}</b>
        {paused
          ? <span class="paused"> · PAUSED {now !== null ? until(rate.pausedUntil, now) : `until ${rate.pausedUntil}`}</span>
          : <span class="ok"> · not paused</span>}
      </p>
    </section>
  );
}

function Meter({ label, value, max, unit }: { label: string; value: number; max: number; unit: string }) {
  return (
    <div class="meter">
      <span>{label}</span>
      <meter min={0} max={max} value={value} />
      <span>{num(value)} / {num(max)}{unit}</span>
    </div>
  );
}
