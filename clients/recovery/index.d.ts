// Types of @reverbgo/echo-recovery (index.js).
import type Pusher from 'pusher-js';

/** A channel's recorded position: the server's epoch and the last serial seen. */
export interface RecoveryPosition {
  epoch: string;
  serial: number;
}

/**
 * The data of pusher:resume_failed (channel.bind / Echo .listen('.pusher:resume_failed') /
 * onResumeFailed): sent after a failed resume and on a live socket when the server could not
 * deliver every event in order. The events that follow are those after (epoch, serial),
 * which becomes the channel's position (both absent for not_enabled).
 */
export interface ResumeFailed {
  reason: 'epoch_changed' | 'too_old' | 'not_enabled' | string;
  epoch?: string;
  serial?: number;
}

/** enableRecovery's options. */
export interface RecoveryOptions {
  /**
   * Called for every pusher:resume_failed of any channel, after the channel's position moved
   * and pusher-js emitted the event: the app refetches the channel's state.
   */
  onResumeFailed?: (channel: string, data: ResumeFailed) => void;
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
export function enableRecovery(pusher: RecoverableClient, options?: RecoveryOptions): RecoveryHandle;
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
  /** accept, with the channel and data of a pusher:resume_failed frame. */
  read(text: string, socketId?: string): { pass: boolean; channel?: string; failed?: ResumeFailed };
  /** Takes a pusher:resume_failed's data for channel: its position becomes (epoch, serial). */
  told(channel: string, data: ResumeFailed, socketId?: string): void;
}
