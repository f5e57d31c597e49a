// The Channels request signature of the package (src/signing.ts) against the
// published test vector of DESIGN.md §3, and what the signer does to a
// request: which parameters it adds, replaces and signs, and that the body
// and headers go out unchanged. The server's side is checked against a live
// Herald in scripts/compat/typescript-client.test.mjs.

import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, createHmac } from 'node:crypto'

import { channelsSigner, stringToSign } from '../dist/signing.js'

// The published vector: key, secret, the signed string and its signature.
const VECTOR = {
  key: '278d425bdf160c739803',
  secret: '7ad3773142a6692b25b8',
  timestamp: 1353088179,
  body: '{"name":"foo","channels":["project-3"],"data":"{\\"some\\":\\"data\\"}"}',
  string: 'POST\n/apps/3/events\nauth_key=278d425bdf160c739803&auth_timestamp=1353088179&auth_version=1.0&body_md5=ec365a775a4cd0599faeb73354201b6f',
  signature: 'da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c'
}

describe('channelsSigner', () => {
  it('signs the published test vector', async () => {
    const sign = channelsSigner({ key: VECTOR.key, secret: VECTOR.secret, now: () => VECTOR.timestamp * 1000 + 999 })
    const signed = await sign(new Request('http://127.0.0.1:8080/apps/3/events', {
      method: 'POST', body: VECTOR.body, headers: { 'Content-Type': 'application/json', 'X-Extra': 'kept' }
    }))
    const url = new URL(signed.url)
    assert.equal(url.pathname, '/apps/3/events')
    assert.deepEqual([...url.searchParams], [
      ['auth_key', VECTOR.key],
      ['auth_timestamp', String(VECTOR.timestamp)],
      ['auth_version', '1.0'],
      ['body_md5', 'ec365a775a4cd0599faeb73354201b6f'],
      ['auth_signature', VECTOR.signature]
    ])
    assert.equal(signed.method, 'POST')
    assert.equal(await signed.text(), VECTOR.body)
    assert.equal(signed.headers.get('content-type'), 'application/json')
    assert.equal(signed.headers.get('x-extra'), 'kept')
  })

  it('builds the published string to sign', () => {
    const params = [['auth_version', '1.0'], ['body_md5', 'ec365a775a4cd0599faeb73354201b6f'], ['auth_key', VECTOR.key], ['auth_timestamp', '1353088179']]
    assert.equal(stringToSign('post', '/apps/3/events', params), VECTOR.string)
  })

  it('lower-cases and stably sorts keys, leaves auth_signature out and values unescaped', () => {
    const params = [['info', 'user_count,subscription_count'], ['channels[]', 'b c'], ['Filter_By_Prefix', 'presence-'], ['channels[]', 'a&b=c'], ['auth_signature', 'x']]
    assert.equal(stringToSign('GET', '/apps/1/channels', params),
      'GET\n/apps/1/channels\nchannels[]=b c&channels[]=a&b=c&filter_by_prefix=presence-&info=user_count,subscription_count')
  })

  it('signs the query it sends: the caller\'s parameters, decoded, and no body_md5 without a body', async () => {
    const now = 1700000000
    const secret = 's3cret'
    const sign = channelsSigner({ key: 'k', secret, now: () => now * 1000 })
    // A caller's own signing parameters, in any case, are replaced.
    const signed = await sign(new Request('http://h/apps/1/channels/a%40b%3Bc?info=user_count%2Csubscription_count&q=x+y&AUTH_KEY=evil&body_md5=0', { method: 'GET' }))
    const url = new URL(signed.url)
    assert.equal(url.pathname, '/apps/1/channels/a%40b%3Bc')
    const sent = [...url.searchParams]
    assert.deepEqual(sent.map(([k]) => k), ['info', 'q', 'auth_key', 'auth_timestamp', 'auth_version', 'auth_signature'])
    const expected = 'GET\n/apps/1/channels/a%40b%3Bc\nauth_key=k&auth_timestamp=1700000000&auth_version=1.0&info=user_count,subscription_count&q=x y'
    assert.equal(url.searchParams.get('auth_signature'), createHmac('sha256', secret).update(expected).digest('hex'))
    assert.equal(signed.body, null)
  })

  it('signs the MD5 of the exact body bytes', async () => {
    const body = new Uint8Array([0xff, 0x00, 0x7b, 0xc3, 0xa9])
    const signed = await channelsSigner({ key: 'k', secret: 's' })(new Request('http://h/apps/1/events', { method: 'POST', body }))
    assert.equal(new URL(signed.url).searchParams.get('body_md5'), createHash('md5').update(body).digest('hex'))
    assert.deepEqual(new Uint8Array(await signed.arrayBuffer()), body)
  })

  it('uses the current time when no clock is given', async () => {
    const before = Math.floor(Date.now() / 1000)
    const signed = await channelsSigner({ key: 'k', secret: 's' })(new Request('http://h/apps/1/channels'))
    const after = Math.floor(Date.now() / 1000)
    const ts = Number(new URL(signed.url).searchParams.get('auth_timestamp'))
    assert.ok(ts >= before && ts <= after, `auth_timestamp ${ts} not within [${before}, ${after}]`)
  })
})
