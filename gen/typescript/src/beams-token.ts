// Hand-written (not generated): the Beams user token, a JWT that binds a
// device to a user, made as the Beams server SDKs' generateToken makes it.
// Herald's server/beamsauth verifies it, server/clientauth makes it for Go.

import { base64url, hmacSHA256, utf8Bytes } from './encoding.js'

/** How long a token stays valid unless expiresIn says otherwise: 24 hours, as with the Beams SDKs. */
export const DEFAULT_TOKEN_TTL_SECONDS = 24 * 60 * 60

/** The longest user id, in characters, that Herald and Beams accept. */
export const MAX_USER_ID_LENGTH = 164

/** What beamsUserToken needs. */
export interface BeamsUserTokenOptions {
  /** The Push instance's id. */
  instanceId: string
  /** The instance's secret key, which signs the token. */
  secretKey: string
  /** The user id: 1 to 164 characters. */
  userId: string
  /** Seconds until the token expires; default 24 hours. */
  expiresIn?: number
}

/**
 * Makes the user token your server hands to a signed-in user's device, which
 * binds itself to the user with it (PUT …/devices/{platform}/{device_id}/user
 * with `Authorization: Bearer <token>`). It is an HS256 JWT signed with the
 * instance's secret key, with `sub` the user id, `iss`
 * `https://<instanceId>.pushnotifications.pusher.com` and `exp` expiresIn from
 * now. The result is `{ token }`, what the Beams client SDKs expect from your
 * server's token endpoint.
 */
export async function beamsUserToken ({ instanceId, secretKey, userId, expiresIn = DEFAULT_TOKEN_TTL_SECONDS }: BeamsUserTokenOptions): Promise<{ token: string }> {
  if (typeof instanceId !== 'string' || instanceId === '') throw new TypeError('beamsUserToken: instanceId is required')
  if (typeof secretKey !== 'string' || secretKey === '') throw new TypeError('beamsUserToken: secretKey is required')
  if (typeof userId !== 'string' || userId === '') throw new TypeError('beamsUserToken: userId must be a non-empty string')
  const length = [...userId].length
  if (length > MAX_USER_ID_LENGTH) {
    throw new RangeError(`beamsUserToken: userId of ${length} characters, at most ${MAX_USER_ID_LENGTH} allowed`)
  }
  if (!Number.isFinite(expiresIn) || expiresIn <= 0) {
    throw new RangeError(`beamsUserToken: expiresIn must be a positive number of seconds, not ${expiresIn}`)
  }
  const header = { alg: 'HS256', typ: 'JWT' }
  const claims = {
    sub: userId,
    // Every Beams SDK hard-codes this issuer, and Herald accepts it.
    iss: `https://${instanceId}.pushnotifications.pusher.com`,
    exp: Math.floor(Date.now() / 1000 + expiresIn)
  }
  const signingInput = `${base64url(utf8Bytes(JSON.stringify(header)))}.${base64url(utf8Bytes(JSON.stringify(claims)))}`
  const signature = await hmacSHA256(secretKey)(utf8Bytes(signingInput))
  return { token: `${signingInput}.${base64url(signature)}` }
}
