// Hand-written (not generated): the client side of the Channels HTTP API
// signature. Herald's server/signing verifies it, server/clientauth is the
// same for Go.
//
// Every request carries auth_key, auth_timestamp, auth_version=1.0, body_md5
// (the hex MD5 of a non-empty body) and auth_signature: the hex
// HMAC-SHA256, keyed with the app secret, of
//
//   METHOD "\n" PATH "\n" QUERY
//
// where QUERY is every query parameter but auth_signature, keys lower-cased
// and sorted, written key=value without URL escaping and joined by "&".

import { hex, hmacSHA256, utf8Bytes } from './encoding.js'
import { md5 } from './md5.js'

/** The auth_version of the signing scheme. */
const AUTH_VERSION = '1.0'

// The parameters the signer sets; a caller's own (in any case) are dropped,
// since the server reads keys case-insensitively.
const SIGNING_PARAMS = new Set(['auth_key', 'auth_timestamp', 'auth_version', 'auth_signature', 'body_md5'])

/** Compares two strings by their UTF-8 bytes, as the server sorts keys. */
function compareBytes (a: string, b: string): number {
  if (a === b) return 0
  const x = utf8Bytes(a)
  const y = utf8Bytes(b)
  const n = Math.min(x.length, y.length)
  for (let i = 0; i < n; i++) {
    if (x[i] !== y[i]) return x[i]! - y[i]!
  }
  return x.length - y.length
}

/**
 * The string a signed request's auth_signature covers: method, path (as
 * sent) and params (in the order they are sent), keys lower-cased and
 * stably sorted, auth_signature left out, values not URL-escaped.
 */
export function stringToSign (method: string, path: string, params: ReadonlyArray<readonly [string, string]>): string {
  const pairs = params
    .map(([k, v]) => [k.toLowerCase(), v] as const)
    .filter(([k]) => k !== 'auth_signature')
  // Array.prototype.sort is stable, so repeated keys keep their order.
  pairs.sort((p, q) => compareBytes(p[0], q[0]))
  return `${method.toUpperCase()}\n${path}\n${pairs.map(([k, v]) => `${k}=${v}`).join('&')}`
}

/** What channelsSigner needs: the app's key and secret, and optionally a clock. */
export interface SignerOptions {
  key: string
  secret: string
  /** Milliseconds since the Unix epoch; default Date.now. Tests set it. */
  now?: () => number
}

/**
 * Returns a function that signs a Channels HTTP API request: it resolves with
 * a copy of request whose query carries the signing parameters. The body is
 * read (from a clone) to sign its MD5, and sent unchanged.
 */
export function channelsSigner ({ key, secret, now = Date.now }: SignerOptions): (request: Request) => Promise<Request> {
  const mac = hmacSHA256(secret)
  return async (request) => {
    const url = new URL(request.url)
    const body = request.body === null ? new Uint8Array(0) : new Uint8Array(await request.clone().arrayBuffer())
    const params: Array<[string, string]> = []
    for (const [k, v] of url.searchParams) {
      if (!SIGNING_PARAMS.has(k.toLowerCase())) params.push([k, v])
    }
    params.push(['auth_key', key], ['auth_timestamp', String(Math.floor(now() / 1000))], ['auth_version', AUTH_VERSION])
    if (body.length > 0) params.push(['body_md5', hex(md5(body))])
    // url.pathname is the path as it goes on the wire (escaped), which the
    // server checks first.
    const signature = hex(await mac(utf8Bytes(stringToSign(request.method, url.pathname, params))))
    params.push(['auth_signature', signature])
    url.search = new URLSearchParams(params).toString()
    return new Request(url, {
      method: request.method,
      headers: request.headers,
      body: body.length > 0 ? body : null,
      signal: request.signal,
      redirect: request.redirect,
      credentials: request.credentials,
      mode: request.mode,
      cache: request.cache,
      referrer: request.referrer,
      referrerPolicy: request.referrerPolicy,
      integrity: request.integrity,
      keepalive: request.keepalive
    })
  }
}
