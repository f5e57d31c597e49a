// The recovery plugin (src/recovery.ts) against a stand-in of the two
// things it touches on a pusher-js instance: the connection's events and
// send_event. What it asks of the server: a recoverable subscription first,
// then the old connection's token and the position of the last event the
// client really got. The server's side is checked against a live Herald
// with the real pusher-js in scripts/compat.

import { describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { enableRecovery } from '../dist/recovery.js'

// fakePusher records what is sent and lets the test emit connection events.
function fakePusher() {
  const handlers = new Map()
  const sent = []
  const pusher = {
    connection: {
      socket_id: '1.1',
      bind(event, cb) {
        if (!handlers.has(event)) handlers.set(event, [])
        handlers.get(event).push(cb)
      },
      unbind(event, cb) {
        handlers.set(event, (handlers.get(event) ?? []).filter((h) => h !== cb))
      },
    },
    send_event(event, data, channel) {
      sent.push({ event, data, channel })
      return true
    },
  }
  const emit = (event, data) => {
    for (const cb of handlers.get(event) ?? []) cb(data)
  }
  const message = (event, channel, data) => emit('message', { event, channel, data })
  const subscribe = (channel, extra = {}) => {
    pusher.send_event('pusher:subscribe', { channel, ...extra })
    return sent.at(-1).data
  }
  return { pusher, sent, emit, message, subscribe, handlers }
}

describe('enableRecovery', () => {
  it('asks for a recoverable subscription on a channel it knows nothing of, keeping the auth', () => {
    const f = fakePusher()
    enableRecovery(f.pusher)
    assert.deepEqual(f.subscribe('private-a', { auth: 'k:sig' }), { channel: 'private-a', auth: 'k:sig', recovery: {} })
  })

  it('resubscribes with the old connection, its token and the last position it got', () => {
    const f = fakePusher()
    enableRecovery(f.pusher)
    f.subscribe('news')
    f.message('pusher_internal:subscription_succeeded', 'news', {})
    f.message('pusher_internal:recovery', 'news', { token: 't1', position: '10-0' })
    f.message('pusher_internal:position', 'news', { id: '11-0' })
    f.message('a', 'news', 'x')
    f.message('pusher_internal:position', 'news', { id: '12-0' })
    f.message('b', 'news', 'y')
    // The connection drops and comes back under another socket id.
    f.emit('connecting')
    f.pusher.connection.socket_id = '2.2'
    f.emit('connected', { socket_id: '2.2' })
    assert.deepEqual(f.subscribe('news').recovery, { socket_id: '1.1', token: 't1', position: '12-0' })
  })

  // A closed connection goes disconnected; one cut without a close frame
  // goes connecting (then unavailable), never through disconnected: each
  // drops the announcement.
  for (const state of ['disconnected', 'connecting', 'unavailable']) {
    it(`keeps the old position when the connection goes ${state} between an announced position and its event`, () => {
      const f = fakePusher()
      enableRecovery(f.pusher)
      f.subscribe('news')
      f.message('pusher_internal:recovery', 'news', { token: 't1', position: '10-0' })
      f.message('pusher_internal:position', 'news', { id: '11-0' })
      f.emit(state)
      // A late message after the drop must not take the dropped announcement.
      f.message('a', 'news', 'x')
      assert.equal(f.subscribe('news').recovery.position, '10-0')
    })
  }

  it('moves the position at once for an event the connection was excluded from', () => {
    const f = fakePusher()
    enableRecovery(f.pusher)
    f.subscribe('news')
    f.message('pusher_internal:recovery', 'news', { token: 't1', position: '10-0' })
    f.message('pusher_internal:position', 'news', { id: '11-0', excluded: true })
    f.emit('connecting')
    assert.equal(f.subscribe('news').recovery.position, '11-0')
  })

  it('takes a new token and position from each answer, per channel', () => {
    const f = fakePusher()
    enableRecovery(f.pusher)
    f.subscribe('a')
    f.subscribe('b')
    f.message('pusher_internal:recovery', 'a', { token: 'ta', position: '1-0' })
    f.message('pusher_internal:recovery', 'b', { token: 'tb', position: '2-0' })
    f.pusher.connection.socket_id = '2.2'
    f.message('pusher_internal:recovery', 'a', { token: 'ta2', position: '3-0' })
    assert.deepEqual(f.subscribe('a').recovery, { socket_id: '2.2', token: 'ta2', position: '3-0' })
    assert.deepEqual(f.subscribe('b').recovery, { socket_id: '1.1', token: 'tb', position: '2-0' })
  })

  it('forgets a channel once unsubscribed, and ignores the messages of channels it does not recover', () => {
    const f = fakePusher()
    enableRecovery(f.pusher)
    f.subscribe('news')
    f.message('pusher_internal:recovery', 'news', { token: 't1', position: '10-0' })
    f.pusher.send_event('pusher:unsubscribe', { channel: 'news' })
    f.message('pusher_internal:position', 'other', { id: '5-0' })
    f.message('x', 'other', 'y')
    assert.deepEqual(f.subscribe('news').recovery, {})
    assert.deepEqual(f.subscribe('other').recovery, {})
  })

  it('leaves every other event as it is, and disable restores send_event', () => {
    const f = fakePusher()
    const original = f.pusher.send_event
    const r = enableRecovery(f.pusher)
    f.pusher.send_event('client-x', { a: 1 }, 'private-a')
    assert.deepEqual(f.sent.at(-1), { event: 'client-x', data: { a: 1 }, channel: 'private-a' })
    r.disable()
    assert.equal(f.pusher.send_event, original)
    assert.deepEqual(f.subscribe('news'), { channel: 'news' })
    for (const list of f.handlers.values()) assert.equal(list.length, 0)
  })
})
