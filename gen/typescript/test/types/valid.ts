// Calls that must compile: the types test (../types.test.mjs) runs tsc over
// this file and errors.ts and expects no error here, so that the errors it
// finds in errors.ts come from the mistakes there, not from the setup.

import { adminClient, beamsUserToken, channelsClient, deviceClient, publishClient, reportingClient, type Channels } from '../../dist/index.js'

const baseUrl = 'http://127.0.0.1:8080'
const instanceId = '8f9a6e22-2483-49aa-8552-125f1a4c5781'

export async function calls (): Promise<void> {
  const channels = channelsClient({ baseUrl, appId: '1', key: 'k', secret: 's' })
  const triggered = await channels.POST('/apps/{app_id}/events', { body: { name: 'e', channels: ['a', 'b'], data: '{}' } })
  if (triggered.error) console.log(triggered.error.error, triggered.error.description)
  const attributes: Channels.components['schemas']['ChannelAttributes'] | undefined = triggered.data?.channels?.['a']
  console.log(attributes?.subscription_count)
  await channels.POST('/apps/{app_id}/batch_events', { body: { batch: [{ name: 'e', channel: 'c', data: '{}' }] } })
  const list = await channels.GET('/apps/{app_id}/channels', { params: { query: { filter_by_prefix: 'presence-', info: 'user_count' } } })
  console.log(list.data?.channels)
  const one = await channels.GET('/apps/{app_id}/channels/{channel_name}', { params: { path: { channel_name: 'c' } } })
  const occupied: boolean | undefined = one.data?.occupied
  console.log(occupied)

  const devices = deviceClient({ baseUrl, instanceId })
  const registered = await devices.POST('/device_api/v1/instances/{instance_id}/devices/fcm', { body: { token: 't' } })
  const id: string | undefined = registered.data?.id
  const { token } = await beamsUserToken({ instanceId, secretKey: 'sk', userId: 'alice', expiresIn: 60 })
  await devices.PUT('/device_api/v1/instances/{instance_id}/devices/{platform}/{device_id}/user', {
    params: { path: { platform: 'fcm', device_id: id ?? '' } }, headers: { Authorization: `Bearer ${token}` }
  })

  const publish = publishClient({ baseUrl, instanceId, secretKey: 'sk' })
  const published = await publish.POST('/publish_api/v1/instances/{instance_id}/publishes/interests', { body: { interests: ['news'], fcm: { notification: { title: 'hi' } } } })
  const publishId: string | undefined = published.data?.publishId
  await publish.GET('/publish_api/v1/instances/{instance_id}/publishes/{publish_id}', { params: { path: { publish_id: publishId ?? '' } } })

  const reporting = reportingClient({ baseUrl, instanceId })
  await reporting.POST('/reporting_api/v2/instances/{instance_id}/events', { body: { event: 'open', publishId: 'p', deviceId: 'd', timestampSecs: 1 } })

  const admin = adminClient({ baseUrl, token: 'admin-token-0123456789' })
  const apps = await admin.GET('/admin/v1/apps')
  console.log(apps.data)
  await admin.GET('/admin/v1/instances/{instance_id}/publishes', { params: { path: { instance_id: instanceId }, query: { limit: 5 } } })
}
