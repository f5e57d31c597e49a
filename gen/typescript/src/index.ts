// Hand-written (not generated): the entry point of @heraldrt/client. The
// types of every API are generated from spec/ into src/generated/ by
// `make generate`; this file only puts a typed openapi-fetch client over
// each, with the API's authentication, and the Beams user token.

import createClient, { type Client, type ClientOptions, type Middleware } from 'openapi-fetch'

import type { paths as AdminPaths } from './generated/admin.js'
import type { paths as ChannelsPaths } from './generated/channels.js'
import type { paths as DevicePaths } from './generated/device.js'
import type { paths as PublishPaths } from './generated/publish.js'
import type { paths as ReportingPaths } from './generated/reporting.js'
import { channelsSigner } from './signing.js'

export { beamsUserToken, DEFAULT_TOKEN_TTL_SECONDS, MAX_USER_ID_LENGTH, type BeamsUserTokenOptions } from './beams-token.js'
export { stringToSign } from './signing.js'
export { enableRecovery, type RecoverablePusher, type Recovery } from './recovery.js'

/** The generated types of each API: `paths`, `components` (schemas), `operations`. */
export type * as Admin from './generated/admin.js'
export type * as Channels from './generated/channels.js'
export type * as Device from './generated/device.js'
export type * as Publish from './generated/publish.js'
export type * as Reporting from './generated/reporting.js'

/**
 * Options every factory passes on to openapi-fetch (a custom `fetch`, extra
 * `headers`, …), besides its own.
 */
export type ExtraOptions = Omit<ClientOptions, 'baseUrl' | 'pathSerializer'>

// Operation types with path parameter K taken out: the client fills it in.
// A `path` left empty becomes optional (`path?: never`), so that calls whose
// only path parameter is K need no params at all.
// The operations of a path item (its other key is `parameters`). Spelled out
// rather than imported from openapi-fetch's helper package, which is not a
// dependency of this one.
type HttpMethod = 'get' | 'put' | 'post' | 'delete' | 'options' | 'head' | 'patch' | 'trace'
type Simplify<T> = { [K in keyof T]: T[K] } & {}
type WithoutPathParam<Params, K extends PropertyKey> = Params extends { path: infer Path }
  ? Simplify<Omit<Params, 'path'> & ([Exclude<keyof Path, K>] extends [never] ? { path?: never } : { path: Simplify<Omit<Path, K>> })>
  : Params
type WithoutParamInOperation<Op, K extends PropertyKey> = { [F in keyof Op]: F extends 'parameters' ? WithoutPathParam<Op[F], K> : Op[F] }

/** paths with the path parameter K bound by the client, so callers leave it out. */
export type BoundPaths<Paths, K extends PropertyKey> = {
  [P in keyof Paths]: { [M in keyof Paths[P]]: M extends HttpMethod ? WithoutParamInOperation<Paths[P][M], K> : Paths[P][M] }
}

/** A client of the Channels HTTP API, /apps/{app_id}/… with app_id bound. */
export type ChannelsClient = Client<BoundPaths<ChannelsPaths, 'app_id'>>
/** A client of the Beams Publish API, with instance_id bound. */
export type PublishClient = Client<BoundPaths<PublishPaths, 'instance_id'>>
/** A client of the Beams Device API, with instance_id bound. */
export type DeviceClient = Client<BoundPaths<DevicePaths, 'instance_id'>>
/** A client of the Beams Reporting API, with instance_id bound. */
export type ReportingClient = Client<BoundPaths<ReportingPaths, 'instance_id'>>
/** A client of Herald's admin API. */
export type AdminClient = Client<AdminPaths>

const METHODS = ['GET', 'PUT', 'POST', 'DELETE', 'OPTIONS', 'HEAD', 'PATCH', 'TRACE'] as const

type Init = { params?: { path?: Record<string, unknown> } & Record<string, unknown> } & Record<string, unknown>

/**
 * Wraps client so that every call sends path parameter name = value. (A path
 * serializer cannot do it: openapi-fetch calls one only when the call has
 * path parameters of its own.)
 */
function bindPathParam<Bound extends {}> (client: Client<any>, name: string, value: string): Client<Bound> {
  const bind = (init?: Init): Init => ({ ...init, params: { ...init?.params, path: { ...init?.params?.path, [name]: value } } })
  const untyped = client as unknown as Record<string, (url: string, init?: Init) => Promise<unknown>>
  const bound: Record<string, unknown> = {
    request: (method: string, url: string, init?: Init) => client.request(method as any, url as any, bind(init) as any),
    use: (...middleware: Middleware[]) => client.use(...middleware),
    eject: (...middleware: Middleware[]) => client.eject(...middleware)
  }
  for (const method of METHODS) bound[method] = (url: string, init?: Init) => untyped[method]!(url, bind(init))
  return bound as unknown as Client<Bound>
}

/** Throws a TypeError unless options has a string baseUrl and a non-empty string of each of names. */
function required (factory: string, options: Record<string, unknown>, names: string[]): void {
  if (options === null || typeof options !== 'object') throw new TypeError(`${factory}: options are required`)
  // '' is a base URL: the page's own origin, for a web app served behind the same host.
  if (typeof options['baseUrl'] !== 'string') throw new TypeError(`${factory}: baseUrl is required`)
  for (const name of names) {
    const v = options[name]
    if (typeof v !== 'string' || v === '') throw new TypeError(`${factory}: ${name} is required`)
  }
}

/** What channelsClient needs: the server's base URL and the app's id, key and secret. */
export interface ChannelsClientOptions extends ExtraOptions {
  baseUrl: string
  appId: string
  key: string
  secret: string
}

/**
 * A typed client of the Channels HTTP API of one app. Every request is
 * signed (auth_key, auth_timestamp, auth_version, body_md5, auth_signature)
 * with Web Crypto, when it is sent; paths are the spec's, without app_id:
 *
 *   const channels = channelsClient({ baseUrl, appId: '42', key, secret })
 *   await channels.POST('/apps/{app_id}/events', { body: { name: 'e', channel: 'c', data: '{}' } })
 */
export function channelsClient (options: ChannelsClientOptions): ChannelsClient {
  required('channelsClient', options as unknown as Record<string, unknown>, ['appId', 'key', 'secret'])
  const { baseUrl, appId, key, secret, ...extra } = options
  const client = createClient<ChannelsPaths>({ ...extra, baseUrl })
  const sign = channelsSigner({ key, secret })
  client.use({ onRequest: async ({ request }) => await sign(request) })
  return bindPathParam(client, 'app_id', appId)
}

/** What publishClient needs: the server's base URL, the instance's id and secret key. */
export interface PublishClientOptions extends ExtraOptions {
  baseUrl: string
  instanceId: string
  secretKey: string
}

/**
 * A typed client of the Beams Publish API of one instance, sending the
 * secret key as a bearer token:
 *
 *   const publish = publishClient({ baseUrl, instanceId, secretKey })
 *   await publish.POST('/publish_api/v1/instances/{instance_id}/publishes/interests', { body: { interests: ['news'], fcm: {…} } })
 */
export function publishClient (options: PublishClientOptions): PublishClient {
  required('publishClient', options as unknown as Record<string, unknown>, ['instanceId', 'secretKey'])
  const { baseUrl, instanceId, secretKey, ...extra } = options
  const client = createClient<PublishPaths>({ ...extra, baseUrl, headers: { ...plainHeaders(extra.headers), Authorization: `Bearer ${secretKey}` } })
  return bindPathParam(client, 'instance_id', instanceId)
}

/** What deviceClient and reportingClient need: the server's base URL and the instance's id. */
export interface InstanceClientOptions extends ExtraOptions {
  baseUrl: string
  instanceId: string
}

/**
 * A typed client of the Beams Device API of one instance, which is anonymous;
 * binding a device to a user takes the user's token (beamsUserToken) in that
 * call's headers:
 *
 *   const devices = deviceClient({ baseUrl, instanceId })
 *   const { data } = await devices.POST('/device_api/v1/instances/{instance_id}/devices/fcm', { body: { token } })
 */
export function deviceClient (options: InstanceClientOptions): DeviceClient {
  required('deviceClient', options as unknown as Record<string, unknown>, ['instanceId'])
  const { baseUrl, instanceId, ...extra } = options
  return bindPathParam(createClient<DevicePaths>({ ...extra, baseUrl }), 'instance_id', instanceId)
}

/**
 * A typed client of the Beams Reporting API of one instance (anonymous), the
 * delivery and open reports the device SDKs send.
 */
export function reportingClient (options: InstanceClientOptions): ReportingClient {
  required('reportingClient', options as unknown as Record<string, unknown>, ['instanceId'])
  const { baseUrl, instanceId, ...extra } = options
  return bindPathParam(createClient<ReportingPaths>({ ...extra, baseUrl }), 'instance_id', instanceId)
}

/** What adminClient needs: the server's base URL and HERALD_ADMIN_TOKEN. */
export interface AdminClientOptions extends ExtraOptions {
  baseUrl: string
  token: string
}

/**
 * A typed client of Herald's admin API (/admin/v1/…), sending the admin token
 * (HERALD_ADMIN_TOKEN) as a bearer token.
 */
export function adminClient (options: AdminClientOptions): AdminClient {
  required('adminClient', options as unknown as Record<string, unknown>, ['token'])
  const { baseUrl, token, ...extra } = options
  return createClient<AdminPaths>({ ...extra, baseUrl, headers: { ...plainHeaders(extra.headers), Authorization: `Bearer ${token}` } })
}

/** headers (any form ClientOptions takes) as a plain object, so the factory's Authorization can be added. */
function plainHeaders (headers: ClientOptions['headers']): Record<string, string | number | boolean | Array<string | number | boolean> | null | undefined> {
  if (headers === undefined) return {}
  if (headers instanceof Headers || Array.isArray(headers)) return Object.fromEntries(new Headers(headers as HeadersInit))
  return headers as Record<string, string>
}
