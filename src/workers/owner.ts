import { randomBytes } from "node:crypto";

/**
 * Identifies this process as a lease holder. Each claim gets its own token `<owner>:<n>`, so a
 * stale worker cannot complete a row that was re-claimed, even by this same process; shutdown
 * releases every lease with the owner prefix.
 */
export class LeaseOwner {
  readonly id: string;
  private counter = 0;

  constructor(id?: string) {
    this.id = id ?? `w${randomBytes(6).toString("hex")}`;
  }

  token(): string {
    this.counter += 1;
    return `${this.id}:${this.counter}`;
  }
}
