// The package's MD5 (src/md5.ts; Web Crypto has none) against the test suite
// of RFC 1321 (appendix A.5) and against node:crypto on inputs of every length
// around the 64-byte block and padding boundaries.

import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'

import { md5 } from '../dist/md5.js'
import { hex } from '../dist/encoding.js'

const text = (s) => new TextEncoder().encode(s)

describe('md5', () => {
  it('matches the RFC 1321 test suite', () => {
    const suite = {
      '': 'd41d8cd98f00b204e9800998ecf8427e',
      a: '0cc175b9c0f1b6a831c399e269772661',
      abc: '900150983cd24fb0d6963f7d28e17f72',
      'message digest': 'f96b697d7cb7938d525a2f31aaf161d0',
      abcdefghijklmnopqrstuvwxyz: 'c3fcd3d76192e4007dfb496cca67e13b',
      ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789: 'd174ab98d277d9f5a5611c2c9f419d9f',
      '12345678901234567890123456789012345678901234567890123456789012345678901234567890': '57edf4a22be3c955ac49da2e2107b67a'
    }
    for (const [input, want] of Object.entries(suite)) assert.equal(hex(md5(text(input))), want, `md5(${JSON.stringify(input)})`)
  })

  it('matches node:crypto for every length up to 300 bytes and a large input', () => {
    const lengths = [...Array(301).keys(), 4095, 4096, 4097, 1 << 20]
    let seed = 1
    for (const n of lengths) {
      const data = new Uint8Array(n)
      for (let i = 0; i < n; i++) {
        seed = (seed * 1103515245 + 12345) >>> 0
        data[i] = seed >>> 24
      }
      assert.equal(hex(md5(data)), createHash('md5').update(data).digest('hex'), `length ${n}`)
    }
  })
})
