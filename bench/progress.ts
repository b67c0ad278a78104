// One progress line on stderr: rewritten in place on a terminal, one line per step otherwise.

export class Progress {
  readonly #tty: boolean;
  readonly #started = Date.now();
  #shown = false;

  constructor(private readonly stream: NodeJS.WriteStream = process.stderr) {
    this.#tty = Boolean(stream.isTTY);
  }

  elapsed(): string {
    const s = (Date.now() - this.#started) / 1000;
    return s < 60 ? `${s.toFixed(0)} s` : `${Math.floor(s / 60)} min ${(s % 60).toFixed(0)} s`;
  }

  /** Replaces the progress line. */
  update(text: string): void {
    const line = `${text}  (${this.elapsed()})`;
    if (this.#tty) {
      const cols = this.stream.columns || 120;
      this.stream.write(`\r\x1b[K${[...line].slice(0, cols - 1).join('')}`);
      this.#shown = true;
    } else {
      this.stream.write(line + '\n');
    }
  }

  /** A permanent line on stderr (the progress line is redrawn by the next update). */
  log(text: string): void {
    this.clear();
    this.stream.write(text + '\n');
  }

  clear(): void {
    if (this.#tty && this.#shown) {
      this.stream.write('\r\x1b[K');
      this.#shown = false;
    }
  }
}
