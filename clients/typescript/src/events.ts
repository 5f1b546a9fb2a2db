/** Small event primitives: a typed listener registry and a push-to-pull queue for async iteration. */

/** A map from event name to the listener's argument list. */
export type EventMap = { [event: string]: unknown[] };

/** A listener for event `E` of `Events`. */
export type Listener<Events extends EventMap, E extends keyof Events> = (...args: Events[E]) => void;

/**
 * A typed event emitter.
 *
 * Unlike Node's EventEmitter there is no special `"error"` event that throws when nobody listens, and a listener that
 * throws does not stop the others: a bug in one consumer of `changed` must not starve the rest (its exception is
 * rethrown asynchronously, so it still surfaces as an uncaught exception).
 */
export class TypedEmitter<Events extends EventMap> {
	// Stored untyped: each set holds listeners of one event, and on()/emit() are what tie the two together.
	private readonly listeners = new Map<keyof Events, Set<unknown>>();

	/** Calls `listener` on every `event` until `off`. Returns a function that removes it. */
	on<E extends keyof Events>(event: E, listener: Listener<Events, E>): () => void {
		let set = this.listeners.get(event);
		if (!set) {
			set = new Set();
			this.listeners.set(event, set);
		}
		set.add(listener);
		return () => this.off(event, listener);
	}

	/** Calls `listener` on the next `event` only. Returns a function that removes it. */
	once<E extends keyof Events>(event: E, listener: Listener<Events, E>): () => void {
		const wrapper: Listener<Events, E> = (...args) => {
			off();
			listener(...args);
		};
		const off = this.on(event, wrapper);
		return off;
	}

	/** Removes `listener` from `event`. */
	off<E extends keyof Events>(event: E, listener: Listener<Events, E>): void {
		this.listeners.get(event)?.delete(listener);
	}

	/** The number of listeners on `event`. */
	listenerCount(event: keyof Events): number {
		return this.listeners.get(event)?.size ?? 0;
	}

	/** @internal Calls every listener of `event` with `args`. */
	protected emit<E extends keyof Events>(event: E, ...args: Events[E]): void {
		const set = this.listeners.get(event);
		if (!set) return;
		for (const listener of [...set]) {
			try {
				(listener as (...a: Events[E]) => void)(...args);
			} catch (error) {
				queueMicrotask(() => {
					throw error;
				});
			}
		}
	}
}

/**
 * An async iterator fed by `push`. Items are buffered until read (the buffer is unbounded: a consumer that stops
 * reading should `return()` the iterator, which unsubscribes it). `end()` finishes the iteration after the buffered
 * items; `fail()` rejects the next read after them.
 */
export class AsyncQueue<T> implements AsyncIterableIterator<T> {
	private readonly items: T[] = [];
	private readonly waiters: { resolve: (r: IteratorResult<T>) => void; reject: (e: unknown) => void }[] = [];
	private done = false;
	private error: unknown = undefined;
	private failed = false;
	private readonly onReturn: () => void;

	/** @param onReturn Called once when the consumer stops early (`break`, `return()`) or the queue ends. */
	constructor(onReturn: () => void) {
		this.onReturn = onReturn;
	}

	/** Adds an item (ignored after `end`/`fail`/`return`). */
	push(item: T): void {
		if (this.done) return;
		const waiter = this.waiters.shift();
		if (waiter) waiter.resolve({ value: item, done: false });
		else this.items.push(item);
	}

	/** Ends the iteration once the buffered items are read. */
	end(): void {
		if (this.done) return;
		this.done = true;
		this.onReturn();
		for (const waiter of this.waiters.splice(0)) waiter.resolve({ value: undefined, done: true });
	}

	/** Ends the iteration with an error: reads waiting now reject, or the first read after the buffered items. */
	fail(error: unknown): void {
		if (this.done) return;
		this.done = true;
		this.onReturn();
		// Waiting readers mean nothing is buffered, so they are the ones to tell; otherwise the error waits its turn.
		if (this.waiters.length > 0) {
			for (const waiter of this.waiters.splice(0)) waiter.reject(error);
		} else {
			this.failed = true;
			this.error = error;
		}
	}

	/** The next item, waiting for one if none is buffered. */
	next(): Promise<IteratorResult<T>> {
		if (this.items.length > 0) return Promise.resolve({ value: this.items.shift() as T, done: false });
		if (this.done) {
			if (this.failed) {
				this.failed = false;
				return Promise.reject(this.error);
			}
			return Promise.resolve({ value: undefined, done: true });
		}
		return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
	}

	/** Stops the iteration and unsubscribes (what `break` in `for await` calls). */
	return(): Promise<IteratorResult<T>> {
		this.items.length = 0;
		this.failed = false;
		this.end();
		return Promise.resolve({ value: undefined, done: true });
	}

	[Symbol.asyncIterator](): AsyncIterableIterator<T> {
		return this;
	}
}
