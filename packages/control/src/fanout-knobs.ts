/**
 * Every knob of the map fan-out, in one place: when a batch of changes goes out, how the work of sending it is cut
 * up, which parts of a message are encoded once for many sessions, how compression is done, and what is kept in
 * memory. Each says what it decides and why it has its value; docs/performance.md holds the measurements.
 */

// ---- When a batch of changes goes out (batch-window.ts, scheduler.ts) ----
// Every flush costs a message per session (encode, compress, encrypt, write), so changes wait a little to share one;
// under a burst they wait longer, so that fanning out does not starve the joins producing the changes.

/** QUIET_WINDOW_MS: a change finding the hub quiet waits this long for the rest of its operation (one commit publishes several changes). */
export const QUIET_WINDOW_MS = 2;
/** BASE_WINDOW_MS: a change right behind a flush or another change waits this long, so that a burst's changes share a message. */
export const BASE_WINDOW_MS = 20;
/** MAX_DOUBLED_WINDOW_MS caps the doubling of the window on a busy loop: connected peers learn of a burst's changes at most this late. */
export const MAX_DOUBLED_WINDOW_MS = 1280;
/** WINDOW_PER_FLUSH_COST: with changes back to back the window is at least this many times the last flush's cost, so fanning out takes at most about a fifth of the server. */
export const WINDOW_PER_FLUSH_COST = 4;
/** MAX_COST_WINDOW_MS caps that floor, which may pass MAX_DOUBLED_WINDOW_MS: only flushes of thousands of sessions cost enough to reach it. */
export const MAX_COST_WINDOW_MS = 10_000;
/** BUSY_UTILIZATION: event-loop utilization at or above which the loop counts as busy (a burst under way, not a lull). */
export const BUSY_UTILIZATION = 0.75;
/** LONE_FLUSH_CHANGES: a flush that carried at most this many changes was no burst's, and does not lengthen the next window. */
export const LONE_FLUSH_CHANGES = 3;
/** BURST_OVER_GAP_MS: a change coming this long after the one before, on a loop idle since the batch began, ends the burst: the batch goes out after QUIET_WINDOW_MS. */
export const BURST_OVER_GAP_MS = 100;
/** LULL_MS: no change at all for this long on an idle loop ends the burst too (nothing more is coming to share the batch), for a batch waiting a longer window. */
export const LULL_MS = 500;

// ---- How the work of sending is cut up (scheduler.ts) ----

/** SLICE_MS: a flush or a round of first maps runs in slices of about this much work, the event loop free between them, so handshakes and map requests are not held up. */
export const SLICE_MS = 20;
/** FIRST_MAP_WAIT_PER_PREPARE_COST: new sessions wait for their first maps this many times what preparing the policy's view last cost, so a join burst prepares it once for many joiners. */
export const FIRST_MAP_WAIT_PER_PREPARE_COST = 2;
/** MAX_FIRST_MAP_WAIT_MS caps that wait: joining devices never wait for the batch window itself. */
export const MAX_FIRST_MAP_WAIT_MS = 250;

// ---- What is encoded once for many sessions (delta-encoder.ts, frames.ts, peer-blocks.ts) ----

/** SHARED_FRAME_MIN: a part many messages share (a PeersChanged list, a block of a full map's peers) at least this long is compressed once, as a frame of its own; shorter ones cost more as a frame than compressed inline. */
export const SHARED_FRAME_MIN = 2048;
/** SHARED_BLOCK_MIN: a block of a rule's sources at least this long (or SHARED_FRAME_MIN, when lower) is compressed once per flush for every session sending it. */
export const SHARED_BLOCK_MIN = 256;
/** UNSHARED_KEY_LENGTH: a message whose key is longer holds a part only its session sends (a long filter update): it is neither looked up nor kept for sharing. */
export const UNSHARED_KEY_LENGTH = 2048;
/** PEER_BLOCK_IDS: a full map's peers go in blocks of this many node ids, so joiners of one peer class receive the same compressed blocks. */
export const PEER_BLOCK_IDS = 256;
/** PEER_BLOCK_CACHE_BYTES bounds the compressed peer blocks kept for the next joiners (least recently used dropped first). */
export const PEER_BLOCK_CACHE_BYTES = 16 * 1024 * 1024;
/** PEER_BLOCK_IDLE_MS: peer blocks no full map asked for in this long are dropped; they serve a join burst, not the time between bursts. */
export const PEER_BLOCK_IDLE_MS = 10_000;

// ---- How a frame is compressed (frames.ts) ----

/** ZSTD_LEVEL: zstd's fastest level, as headscale and Tailscale's own test servers use; on map JSON higher levels cost twice the CPU for no smaller output. */
export const ZSTD_LEVEL = 1;
/** RAW_FRAME_MAX: text shorter than this goes in a zstd frame uncompressed; a compressor call would save a handful of bytes at most. */
export const RAW_FRAME_MAX = 256;
/** WASM_MAX_INPUT: without the native addon, JSON up to this size is compressed by zstd-wasm (cheaper per call), larger by node:zlib (faster per byte). */
export const WASM_MAX_INPUT = 32 * 1024;

// ---- What is kept in memory (sessions.ts, owners.ts) ----

/** OWNER_SETS_MAX bounds the table of shared "owners a client's netmap shows" sets; a tailnet shows far fewer. */
export const OWNER_SETS_MAX = 4096;
/** DELETED_REMEMBERED bounds how many deleted nodes are remembered, to answer their devices as themselves. */
export const DELETED_REMEMBERED = 4096;

// ---- Keep-alives (map-session.ts) ----

/** KEEPALIVE_BASE_MS: a quiet stream gets a keep-alive after this long, well inside the client's 120 s watchdog. */
export const KEEPALIVE_BASE_MS = 50_000;
/** KEEPALIVE_JITTER_MS: each session waits up to this much longer, drawn once, so keep-alives do not go out in step. */
export const KEEPALIVE_JITTER_MS = 9_000;
/** KEEPALIVE_STEP_MS: the jitter's granularity; Node keeps a timer list per distinct duration, so coarse steps bound them to 90. */
export const KEEPALIVE_STEP_MS = 100;
