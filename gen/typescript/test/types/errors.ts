// Deliberate mistakes, each of which must fail to compile: the types test
// (../types.test.mjs) runs tsc and expects exactly the error codes named by
// the `// error TSnnnn` comment at the end of each line below, on that line,
// and no other error.

import { adminClient, beamsUserToken, channelsClient, deviceClient, publishClient, reportingClient } from '../../dist/index.js'

const baseUrl = 'http://127.0.0.1:8080'
const instanceId = '8f9a6e22-2483-49aa-8552-125f1a4c5781'

export async function mistakes (): Promise<void> {
  const channels = channelsClient({ baseUrl, appId: '1', key: 'k', secret: 's' })
  await channels.POST('/apps/{app_id}/event', { body: { name: 'e', channel: 'c', data: '{}' } }) // error TS2345: no such path
  await channels.GET('/apps/{app_id}/events') // error TS2554: no GET on that path
  await channels.POST('/apps/{app_id}/events', { body: { name: 'e', channel: 'c', data: { a: 1 } } }) // error TS2322: data is a string
  await channels.POST('/apps/{app_id}/events', { body: { name: 'e', channel: 'c' } }) // error TS2322: data missing
  await channels.GET('/apps/{app_id}/channels/{channel_name}', {}) // error TS2345: channel_name missing
  await channels.POST('/apps/{app_id}/events', { params: { path: { app_id: '2' } }, body: { name: 'e', channel: 'c', data: '{}' } }) // error TS2322: app_id is bound
  await channels.GET('/apps/{app_id}/channels', { params: { query: { filter: 'x' } } }) // error TS2353: unknown query parameter
  channelsClient({ baseUrl, appId: '1', key: 'k' }) // error TS2345: secret missing

  const devices = deviceClient({ baseUrl, instanceId })
  await devices.POST('/device_api/v1/instances/{instance_id}/devices/fcm', { body: {} }) // error TS2322: token missing
  await devices.PUT('/device_api/v1/instances/{instance_id}/devices/{platform}/{device_id}/user', { params: { path: { platform: 'android', device_id: 'd' } } }) // error TS2322: no such platform

  const publish = publishClient({ baseUrl, instanceId, secretKey: 'sk' })
  await publish.POST('/publish_api/v1/instances/{instance_id}/publishes/interests', { body: { interests: 'news' } }) // error TS2322: interests is an array
  await publish.POST('/publish_api/v1/instances/{instance_id}/publishes/users', { body: { users: ['u'] } }) // error TS2322: one of apns, fcm, web is required
  const published = await publish.POST('/publish_api/v1/instances/{instance_id}/publishes/users', { body: { users: ['u'], web: { notification: { title: 'hi' } } } })
  const n: number | undefined = published.data?.publishId // error TS2322: publishId is a string

  const reporting = reportingClient({ baseUrl, instanceId })
  await reporting.POST('/reporting_api/v2/instances/{instance_id}/events', { body: { event: 'open', publishId: 'p', deviceId: 'd', timestampSecs: '1' } }) // error TS2322: timestampSecs is a number

  const admin = adminClient({ baseUrl, token: 'admin-token-0123456789' })
  await admin.DELETE('/admin/v1/apps') // error TS2554: no DELETE on that path
  await beamsUserToken({ instanceId, secretKey: 'sk', user: 'alice' }) // error TS2353: the option is userId
  console.log(n)
}
