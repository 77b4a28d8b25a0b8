// Estimates the time left from measured progress: the rate is the progress made over the last `window` seconds
// (not the server's instantaneous speed; from the first progress, not from before it), and the shown value counts down smoothly: it follows the estimate, is
// never negative, and rises by at most `maxRise` seconds per second of wall time (and no more than that at once).
// With no progress over a whole window (a stalled job), there is no estimate.

export class EtaEstimator {
  constructor({ window = 10, minimumSpan = 2, maxRise = 3, smoothing = 0.3 } = {}) {
    this.window = window;
    this.minimumSpan = minimumSpan;
    this.maxRise = maxRise;
    this.smoothing = smoothing;
    this.samples = [];
    this.shown = null;
    this.shownAt = null;
  }

  // `fraction` 0 to 1 at `now` seconds; returns the seconds left to show, or null until there is enough to measure.
  update(fraction, now) {
    const last = this.samples[this.samples.length - 1];
    if (last && fraction < last.fraction) {
      // Progress went back (a new attempt): measure again from here.
      this.samples = [];
      this.shown = null;
      this.shownAt = null;
    }
    // Until the first progress, only the latest reading counts: a job's first seconds write nothing (the process
    // starts, the encoder fills its look-ahead), and measuring from its start made the first estimates a third too
    // long. Once there is an estimate, a pause is part of the pace.
    if (this.shown === null && this.samples.length > 0 && this.samples.every((sample) => sample.fraction === fraction)) {
      this.samples = [];
    }
    this.samples.push({ fraction, now });
    while (this.samples.length > 2 && now - this.samples[0].now > this.window) this.samples.shift();
    const first = this.samples[0];
    const span = now - first.now;
    const made = fraction - first.fraction;
    if (fraction >= 1) return this.set(0, now);
    if (made <= 0 && span >= this.window) return this.set(null, now);
    if (span < this.minimumSpan || made <= 0) {
      // No measurable progress yet: the last value keeps counting down, not below zero.
      if (this.shown === null) return null;
      return this.set(Math.max(0, this.shown - (now - this.shownAt)), now);
    }
    const estimate = (1 - fraction) * span / made;
    if (this.shown === null) return this.set(estimate, now);
    const elapsed = now - this.shownAt;
    const counted = Math.max(0, this.shown - elapsed);
    let next = counted + this.smoothing * (estimate - counted);
    next = Math.min(next, counted + this.maxRise * Math.min(1, elapsed));
    return this.set(Math.max(0, next), now);
  }

  set(value, now) {
    this.shown = value;
    this.shownAt = now;
    return value;
  }
}

// "1 min 05 s", "12 s".
export function formatSeconds(seconds) {
  const whole = Math.max(0, Math.round(seconds));
  if (whole < 60) return `${whole} s`;
  const minutes = Math.floor(whole / 60);
  if (minutes < 60) return `${minutes} min ${String(whole % 60).padStart(2, "0")} s`;
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, "0")} min`;
}

export function formatBytes(bytes) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) { value /= 1000; unit += 1; }
  return `${value.toFixed(unit === 0 ? 0 : 1)} ${units[unit]}`;
}
