// Hand-written (not generated): the byte encodings and the HMAC-SHA256 that
// the signing and token code share, on Web Crypto (globalThis.crypto.subtle,
// in browsers and in Node 20), with no Node-only API.

const utf8 = new TextEncoder()

/** The UTF-8 bytes of s. */
export function utf8Bytes (s: string): Uint8Array<ArrayBuffer> {
  return utf8.encode(s)
}

/** Lower-case hex of bytes. */
export function hex (bytes: Uint8Array): string {
  let out = ''
  for (const b of bytes) out += b.toString(16).padStart(2, '0')
  return out
}

/** Unpadded base64url (RFC 4648 section 5) of bytes, as JWTs use it. */
export function base64url (bytes: Uint8Array): string {
  let binary = ''
  for (const b of bytes) binary += String.fromCharCode(b)
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')
}

/**
 * Returns a function computing HMAC-SHA256 with secret (its UTF-8 bytes as
 * the key). The key is imported once, on first use, and kept.
 */
export function hmacSHA256 (secret: string): (message: Uint8Array<ArrayBuffer>) => Promise<Uint8Array> {
  let key: Promise<CryptoKey> | undefined
  return async (message) => {
    const subtle = globalThis.crypto?.subtle
    if (subtle === undefined) {
      throw new Error('@heraldrt/client: Web Crypto (crypto.subtle) is not available; it needs Node 20+ or a browser page served over https or from localhost')
    }
    key ??= subtle.importKey('raw', utf8Bytes(secret), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign'])
    return new Uint8Array(await subtle.sign('HMAC', await key, message))
  }
}
