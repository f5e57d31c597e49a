// Hand-written (not generated): the recovery plugin for pusher-js 8. It
// imports nothing, so that a page can load its built file (dist/recovery.js)
// as one ES module without a bundler.
//
// Protocol (Herald's additions to Pusher protocol 7; spec/websocket.asyncapi.yaml):
// - the plugin adds `recovery` to the data of every `pusher:subscribe` it
//   sees go out: `{}` on a channel it knows nothing of, which asks the
//   server to make the subscription recoverable, else `{socket_id, token,
//   position}`: the connection the subscription was on, the secret the
//   server gave that connection for it, and the position of the last event
//   the plugin saw on it;
// - the server answers a recoverable subscription with
//   `pusher_internal:recovery` `{token, position}` on the channel, and
//   sends `pusher_internal:position` `{id}` right before each event it
//   keeps in the channel's history, so the plugin takes `id` as its
//   position once the next message of the channel arrives (a connection
//   cut between the two loses the event and keeps the old position), or
//   `{id, excluded: true}` for an event this connection was excluded from
//   (`socket_id`), which moves the position at once;
// - after a recovering subscribe's `subscription_succeeded` come the
//   missed events, then `pusher:recovered` `{replayed}`, or
//   `pusher:recovery_failed` `{reason}`: events of the channel, which the
//   app binds as it binds any.

/** The parts of a pusher-js 8 instance (or laravel-echo's `echo.connector.pusher`) the plugin uses. */
export interface RecoverablePusher {
  connection: {
    socket_id?: string
    bind(event: string, callback: (data: any) => void): unknown
    unbind(event: string, callback: (data: any) => void): unknown
  }
  send_event(event: string, data: any, channel?: string): boolean
}

/** What the plugin knows of one channel. */
interface ChannelState {
  socketId: string // the connection the token was given to
  token: string
  position: string
  pending?: string // announced by pusher_internal:position, taken with the next message
}

/** The handle enableRecovery returns. */
export interface Recovery {
  /** Stops recovering: subscriptions made from now on are plain ones. */
  disable(): void
}

/**
 * Makes the subscriptions of a pusher-js 8 instance recoverable: after a
 * reconnect within the app's recovery window, each channel gets every event
 * it missed, once and in order, then `pusher:recovered`; where Herald
 * cannot prove nothing was lost, `pusher:recovery_failed` (the cue to
 * refetch). Call it once, right after `new Pusher(…)`.
 */
export function enableRecovery(pusher: RecoverablePusher): Recovery {
  const channels = new Map<string, ChannelState>()
  const onMessage = (m: { event?: string; channel?: string; data?: any }) => {
    const st = m.channel === undefined ? undefined : channels.get(m.channel)
    if (m.event === 'pusher_internal:recovery' && m.channel !== undefined && m.data) {
      channels.set(m.channel, { socketId: pusher.connection.socket_id ?? '', token: String(m.data.token), position: String(m.data.position) })
    } else if (!st) {
      return
    } else if (m.event === 'pusher_internal:position' && m.data) {
      if (m.data.excluded) st.position = String(m.data.id)
      else st.pending = String(m.data.id)
    } else if (st.pending !== undefined) {
      st.position = st.pending
      st.pending = undefined
    }
  }
  // A position announced on a connection that dropped before its event
  // arrived is not the client's.
  const onDropped = () => {
    for (const st of channels.values()) st.pending = undefined
  }

  const send = pusher.send_event
  pusher.send_event = function (event: string, data: any, channel?: string) {
    if (event === 'pusher:subscribe' && data && typeof data.channel === 'string') {
      const st = channels.get(data.channel)
      data = { ...data, recovery: st ? { socket_id: st.socketId, token: st.token, position: st.position } : {} }
    } else if (event === 'pusher:unsubscribe' && data) {
      channels.delete(data.channel)
    }
    return send.call(this, event, data, channel)
  }
  pusher.connection.bind('message', onMessage)
  pusher.connection.bind('disconnected', onDropped)
  pusher.connection.bind('connecting', onDropped)
  pusher.connection.bind('unavailable', onDropped)

  return {
    disable() {
      pusher.send_event = send
      pusher.connection.unbind('message', onMessage)
      pusher.connection.unbind('disconnected', onDropped)
      pusher.connection.unbind('connecting', onDropped)
      pusher.connection.unbind('unavailable', onDropped)
      channels.clear()
    },
  }
}
