// Type declarations for dlock (hand-written; the package is plain JavaScript).
import type { Pool, PoolClient, ClientBase } from 'pg';

/** A lease or wait: milliseconds, or a PostgreSQL interval string ("30s", "1 min"). */
export type Duration = number | string;

/** Anything with pg.Pool's connect(): dlock checks out a client per statement. */
export type Queryable = Pick<Pool, 'connect'>;

export interface LockOptions {
  /** The lease (default: the server's dlock.default_lease, 30 s). */
  lease?: Duration | null;
  /** How long to wait for the lock (default: no limit but statement_timeout; 0: one try). */
  wait?: Duration | null;
  /** The holder text (default: unique to this lock object). */
  holder?: string | null;
  /** Wait in the resource's fair queue. */
  fair?: boolean;
  /** Chubby's lock-delay (needs the server's [fair] SQL). */
  lockDelay?: Duration | null;
  /** A shared (read) holding alongside other shared holders (the C extension's SQL 0.4; 0A000 elsewhere). */
  shared?: boolean;
  /** Ends the wait: the statement is cancelled in the server, a grant that came first given back; rejects with the signal's reason. */
  signal?: AbortSignal | null;
}

/** Permits of a counting semaphore (the C extension's SQL 0.5; 0A000 elsewhere). */
export interface SemaphoreOptions {
  /** At most this many permits are held at once, by all holders (the same for every caller while any is held). */
  maxPermits: number;
  /** Permits this holding takes (default 1). */
  permits?: number;
  lease?: Duration | null;
  wait?: Duration | null;
  holder?: string | null;
  /** Served in ticket order. */
  fair?: boolean;
  /** Ends the wait: the statement is cancelled in the server, a grant that came first given back; rejects with the signal's reason. */
  signal?: AbortSignal | null;
}

/** Several resources at once, all or none (the C extension's SQL 0.5; 0A000 elsewhere). */
export interface MultiLockOptions {
  lease?: Duration | null;
  wait?: Duration | null;
  holder?: string | null;
  /** Shared holdings of every resource. */
  shared?: boolean;
  /** Ends the wait: the statement is cancelled in the server, a grant that came first given back; rejects with the signal's reason. */
  signal?: AbortSignal | null;
}

/** A lease lock, renewed in the background every third of its lease. */
export declare class Lock {
  protected constructor();
  readonly resource: string;
  readonly holder: string;
  /** The fencing token. */
  readonly fence: bigint;
  /** The lease in milliseconds. */
  readonly lease: number;
  /** Aborted, with a LockLost as its reason, when the lease is lost. */
  readonly signal: AbortSignal;
  readonly lost: boolean;
  readonly released: boolean;
  /** The Session it was taken in, or null. */
  readonly session: Session | null;
  /** Gives the lock back; false if the lease had been lost. */
  release(): Promise<boolean>;
  /** dlock.assert_fence in the transaction of `client` (SQLSTATE 55P03 if stale). */
  assertFence(client: ClientBase | PoolClient): Promise<void>;
  /** dlock.check: whether this holding is still current. */
  check(): Promise<boolean>;
}

/** A semaphore's holding: renewed, released and lost like a Lock; its release returns all its permits. */
export declare class Semaphore extends Lock {
  readonly permits: number;
  readonly maxPermits: number;
}

/** Several resources held together: renewed and released together, lost when any holding is. */
export declare class MultiLock extends Lock {
  readonly resources: string[];
  /** The fencing tokens, in the order of `resources` (`fence` is the first). */
  readonly fences: bigint[];
}

export declare function acquire(pool: Queryable, semaphore: string, options: SemaphoreOptions): Promise<Semaphore>;
export declare function acquire(pool: Queryable, resources: readonly string[], options?: MultiLockOptions): Promise<MultiLock>;
export declare function acquire(pool: Queryable, resource: string, options?: LockOptions): Promise<Lock>;
export declare function tryAcquire(pool: Queryable, semaphore: string, options: Omit<SemaphoreOptions, 'wait'>): Promise<Semaphore | null>;
export declare function tryAcquire(pool: Queryable, resources: readonly string[], options?: Omit<MultiLockOptions, 'wait'>): Promise<MultiLock | null>;
export declare function tryAcquire(pool: Queryable, resource: string, options?: Omit<LockOptions, 'wait'>): Promise<Lock | null>;
export declare function withLock<T>(
  pool: Queryable,
  resource: string,
  fn: (lock: Lock) => T | PromiseLike<T>,
  options?: LockOptions,
): Promise<T>;
export declare function withLock<T>(
  pool: Queryable,
  resources: readonly string[],
  fn: (lock: MultiLock) => T | PromiseLike<T>,
  options?: MultiLockOptions,
): Promise<T>;
/** withLock for permits of a semaphore. */
export declare function withSemaphore<T>(
  pool: Queryable,
  semaphore: string,
  fn: (sem: Semaphore) => T | PromiseLike<T>,
  options: SemaphoreOptions,
): Promise<T>;
/** withLock for several resources at once, all or none. */
export declare function withLocks<T>(
  pool: Queryable,
  resources: readonly string[],
  fn: (locks: MultiLock) => T | PromiseLike<T>,
  options?: MultiLockOptions,
): Promise<T>;

export interface ElectionOptions {
  /** This candidate's holder text (default: unique to the Election object). */
  candidate?: string | null;
  /** The leadership's lease (default: the server's). */
  lease?: Duration | null;
}

export interface CampaignOptions {
  /** How long to wait to be elected (default: no limit). */
  wait?: Duration | null;
  /** Ends the wait: the statement is cancelled in the server, a grant that came first given back; rejects with the signal's reason. */
  signal?: AbortSignal | null;
}

export interface ObserveOptions {
  signal?: AbortSignal;
  /** Polling interval behind a pooler, ms (default 200). */
  pollInterval?: number;
  /** Re-read interval while listening, ms (default 5000). */
  recheckInterval?: number;
}

export interface Leader {
  candidate: string;
  value: string | null;
  term: bigint;
  electedAt: Date;
  expiresAt: Date;
}

export declare class Leadership extends Lock {
  /** The term (the holding's fence). */
  readonly term: bigint;
  proclaim(value: string | null): Promise<boolean>;
  resign(): Promise<boolean>;
}

export declare class Election implements AsyncIterable<Leader | null> {
  constructor(pool: Queryable, name: string, options?: ElectionOptions);
  readonly name: string;
  readonly candidate: string;
  readonly leadership: Leadership | null;
  campaign(value?: string | null, options?: CampaignOptions): Promise<Leadership>;
  proclaim(value: string | null): Promise<boolean>;
  resign(): Promise<boolean>;
  leader(): Promise<Leader | null>;
  observe(options?: ObserveOptions): AsyncGenerator<Leader | null, void, undefined>;
  [Symbol.asyncIterator](): AsyncGenerator<Leader | null, void, undefined>;
}

export interface SessionOptions {
  /** How long the session lives without a keepalive (default: the server's dlock.default_lease). */
  ttl?: Duration | null;
  /** The holder of every holding in the session (default: unique to the session). */
  holder?: string | null;
}

/** In a session: no lease or holder of its own (the session's). */
export type InSession<T> = Omit<T, 'lease' | 'holder'>;

/**
 * A session (dlock 1.1): one keepalive every third of its ttl keeps all of
 * its holdings; when it is lost, `signal` is aborted (SessionLost) and so is
 * every one of its locks' (LockLost), before the ttl ends.
 */
export declare class Session {
  protected constructor();
  readonly id: bigint;
  readonly holder: string;
  /** The ttl in milliseconds. */
  readonly ttl: number;
  /** Aborted, with a SessionLost as its reason, when the session is lost. */
  readonly signal: AbortSignal;
  readonly lost: boolean;
  readonly closed: boolean;
  /** The expiry the server's last keepalive gave (null before one). */
  readonly expiresAt: Date | null;
  acquire(semaphore: string, options: InSession<SemaphoreOptions>): Promise<Semaphore>;
  acquire(resources: readonly string[], options?: InSession<MultiLockOptions>): Promise<MultiLock>;
  acquire(resource: string, options?: InSession<LockOptions>): Promise<Lock>;
  tryAcquire(semaphore: string, options: Omit<InSession<SemaphoreOptions>, 'wait'>): Promise<Semaphore | null>;
  tryAcquire(resources: readonly string[], options?: Omit<InSession<MultiLockOptions>, 'wait'>): Promise<MultiLock | null>;
  tryAcquire(resource: string, options?: Omit<InSession<LockOptions>, 'wait'>): Promise<Lock | null>;
  withLock<T>(resource: string, fn: (lock: Lock) => T | PromiseLike<T>, options?: InSession<LockOptions>): Promise<T>;
  campaign(election: string, value?: string | null, options?: CampaignOptions): Promise<Leadership>;
  /** Closes the session, releasing its holdings; false if it had been lost. */
  close(): Promise<boolean>;
}

/** Opens a session (0A000 on a server without sessions). */
export declare function openSession(pool: Queryable, options?: SessionOptions): Promise<Session>;

export declare class DlockError extends Error {
  /** The SQLSTATE, where one applies. */
  code?: string;
}
export declare class LockLost extends DlockError {
  readonly resource: string;
  readonly fence: bigint;
  /** withLock: what the callback threw, if it threw. */
  callbackError?: unknown;
}
export declare class SessionLost extends DlockError {
  /** The session's id. */
  readonly session: bigint;
}
export declare class LockTimeout extends DlockError {
  readonly resource: string;
  code: '55P03';
}
