// Types of @reverbgo/echo-recovery (index.js).
import type Pusher from 'pusher-js';

/** A channel's recorded position: the server's epoch and the last serial seen. */
export interface RecoveryPosition {
  epoch: string;
  serial: number;
}

/** The data of pusher:resume_failed (channel.bind / Echo .listen('.pusher:resume_failed')). */
export interface ResumeFailed {
  reason: 'epoch_changed' | 'too_old' | 'not_enabled' | string;
}

/** What enableRecovery returns. */
export interface RecoveryHandle {
  /** The recorded position of a channel, or undefined before its first recovery subscribe. */
  position(channel: string): RecoveryPosition | undefined;
  /** Stops adding resume and filtering frames (the client keeps working without recovery). */
  disable(): void;
}

/** The minimal client shape enableRecovery needs (a pusher-js 8 Pusher satisfies it). */
export type RecoverableClient = Pick<Pusher, 'connection' | 'send_event'>;

/**
 * Turns recovery on for a pusher-js 8 client; for Laravel Echo pass echo.connector.pusher.
 * Call once, right after creating the client; a second call returns the same handle.
 */
export function enableRecovery(pusher: RecoverableClient): RecoveryHandle;
export default enableRecovery;

/** The position record and duplicate filter enableRecovery uses (for other clients, tests). */
export class RecoveryState {
  constructor();
  /** data.resume for a subscribe to channel, or undefined when nothing is recorded. */
  resumeFor(channel: string): { epoch: string; serial: number; socket_id?: string } | undefined;
  /** Forgets a channel (after an unsubscribe). */
  forget(channel: string): void;
  position(channel: string): RecoveryPosition | undefined;
  /** Reads one raw frame received on socketId; false = drop it (a serial already seen). */
  accept(text: string, socketId?: string): boolean;
}
