// beamsUserToken (src/beams-token.ts): an HS256 JWT with the claims the Beams
// SDKs' generateToken puts in, checked here with node:crypto as an independent
// HMAC, and the options it refuses. A live Herald binding a device with it is
// in scripts/compat/typescript-client.test.mjs.

import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { createHmac } from 'node:crypto'

import { beamsUserToken, DEFAULT_TOKEN_TTL_SECONDS, MAX_USER_ID_LENGTH } from '../dist/index.js'

const INSTANCE_ID = '8f9a6e22-2483-49aa-8552-125f1a4c5781'
const SECRET_KEY = 'SECRET0123456789'

function decode (token) {
  const parts = token.split('.')
  assert.equal(parts.length, 3, token)
  for (const p of parts) assert.match(p, /^[A-Za-z0-9_-]+$/, `not unpadded base64url: ${p}`)
  const [header, claims] = parts.slice(0, 2).map((p) => JSON.parse(Buffer.from(p, 'base64url').toString('utf8')))
  return { parts, header, claims }
}

describe('beamsUserToken', () => {
  it('makes an HS256 JWT with sub, iss and exp, signed with the secret key', async () => {
    const before = Math.floor(Date.now() / 1000)
    const { token } = await beamsUserToken({ instanceId: INSTANCE_ID, secretKey: SECRET_KEY, userId: 'bob/ü 🎉' })
    const after = Math.floor(Date.now() / 1000)
    const { parts, header, claims } = decode(token)
    assert.deepEqual(header, { alg: 'HS256', typ: 'JWT' })
    assert.deepEqual(Object.keys(claims).sort(), ['exp', 'iss', 'sub'])
    assert.equal(claims.sub, 'bob/ü 🎉')
    assert.equal(claims.iss, `https://${INSTANCE_ID}.pushnotifications.pusher.com`)
    assert.ok(Number.isInteger(claims.exp))
    assert.ok(claims.exp >= before + DEFAULT_TOKEN_TTL_SECONDS && claims.exp <= after + DEFAULT_TOKEN_TTL_SECONDS, `exp ${claims.exp}`)
    const mac = createHmac('sha256', SECRET_KEY).update(`${parts[0]}.${parts[1]}`).digest('base64url')
    assert.equal(parts[2], mac)
  })

  it('takes expiresIn in seconds', async () => {
    const before = Math.floor(Date.now() / 1000)
    const { token } = await beamsUserToken({ instanceId: INSTANCE_ID, secretKey: SECRET_KEY, userId: 'u', expiresIn: 60 })
    const { claims } = decode(token)
    assert.ok(claims.exp >= before + 60 && claims.exp <= Math.floor(Date.now() / 1000) + 60, `exp ${claims.exp}`)
  })

  it('accepts a user id of 164 characters and refuses longer, empty ids and missing options', async () => {
    const longest = '🎉'.repeat(MAX_USER_ID_LENGTH) // characters, not UTF-16 units or bytes
    assert.equal(decode((await beamsUserToken({ instanceId: INSTANCE_ID, secretKey: SECRET_KEY, userId: longest })).token).claims.sub, longest)
    await assert.rejects(beamsUserToken({ instanceId: INSTANCE_ID, secretKey: SECRET_KEY, userId: longest + 'x' }), RangeError)
    await assert.rejects(beamsUserToken({ instanceId: INSTANCE_ID, secretKey: SECRET_KEY, userId: '' }), TypeError)
    await assert.rejects(beamsUserToken({ instanceId: '', secretKey: SECRET_KEY, userId: 'u' }), /instanceId/)
    await assert.rejects(beamsUserToken({ instanceId: INSTANCE_ID, userId: 'u' }), /secretKey/)
    for (const expiresIn of [0, -1, Infinity, NaN]) {
      await assert.rejects(beamsUserToken({ instanceId: INSTANCE_ID, secretKey: SECRET_KEY, userId: 'u', expiresIn }), RangeError, `expiresIn ${expiresIn}`)
    }
  })
})
