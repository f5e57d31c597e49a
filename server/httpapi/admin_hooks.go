package httpapi

// TriggerHook is told of every event published through the Channels HTTP API,
// once per channel, after it has been handed to the hub: the debug console
// shows it. (The hub counts them: hub.AppStats' Triggered.) It must return
// at once.
type TriggerHook func(appID, channel, event, data string)

func noTrigger(string, string, string, string) {}
