package testutil

import "github.com/reverbgo/reverbgo/config"

// Apps is a fake app directory: the apps of a test, looked up by id or key as the bridge
// (bridge.Apps, bridge.AppLister), the MCP server and the console look apps up. The tests
// hold the *config.App values, so a test may change an app after the harness took it.
type Apps []*config.App

// AppByID returns the app with this id, or nil.
func (a Apps) AppByID(id string) *config.App {
	for _, app := range a {
		if app.ID == id {
			return app
		}
	}
	return nil
}

// AppByKey returns the app with this key, or nil.
func (a Apps) AppByKey(key string) *config.App {
	for _, app := range a {
		if app.Key == key {
			return app
		}
	}
	return nil
}

// AllApps returns every app, in the order given.
func (a Apps) AllApps() []*config.App { return a }
