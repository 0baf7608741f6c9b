package config

import (
	"strings"
	"testing"
)

const twoApps = `
server: {host: 127.0.0.1, port: 9000, path: /file}
scaling: {redis_url: "redis://fileuser:filepass@filehost:7000/3"}
apps:
  - {app_id: "1", key: k1, secret: s1, ping_interval: 5}
  - {app_id: "2", key: k2, secret: s2}
`

func TestEnvOverrides(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		env   map[string]string
		check func(t *testing.T, c *Config)
	}{
		{"server", twoApps, map[string]string{
			"REVERB_SERVER_HOST": "::", "REVERB_SERVER_PORT": "6001", "REVERB_SERVER_PATH": "reverb/",
			"REVERB_MAX_REQUEST_SIZE": "20000",
		}, func(t *testing.T, c *Config) {
			s := c.Server
			if s.Host != "::" || s.Port != 6001 || s.Path != "/reverb" || s.MaxRequestSize != 20000 {
				t.Errorf("%+v", s)
			}
		}},
		{"server path emptied", twoApps, map[string]string{"REVERB_SERVER_PATH": "(empty)"},
			func(t *testing.T, c *Config) {
				if c.Server.Path != "" {
					t.Errorf("path %q", c.Server.Path)
				}
			}},
		{"unset and null change nothing", twoApps, map[string]string{"REVERB_SERVER_HOST": "null", "REDIS_PASSWORD": "null"},
			func(t *testing.T, c *Config) {
				if c.Server.Host != "127.0.0.1" || c.Scaling.RedisURL != "redis://fileuser:filepass@filehost:7000/3" {
					t.Errorf("%+v %+v", c.Server, c.Scaling)
				}
			}},
		{"app created from env", "server: {port: 8080}\n", map[string]string{
			"REVERB_APP_ID": "env-id", "REVERB_APP_KEY": "env-key", "REVERB_APP_SECRET": "env-secret",
		}, func(t *testing.T, c *Config) {
			a := c.AppByKey("env-key")
			if len(c.Apps) != 1 || a == nil || a.ID != "env-id" || a.Secret != "env-secret" ||
				a.ActivityTimeout != 30 || a.MaxMessageSize != 10000 || !a.IsEnabled() {
				t.Errorf("%+v", c.Apps)
			}
		}},
		{"first app overridden", twoApps, map[string]string{
			"REVERB_APP_KEY": "new-key", "REVERB_APP_SECRET": "new-secret", "REVERB_APP_PING_INTERVAL": "30",
			"REVERB_APP_ACTIVITY_TIMEOUT": "20", "REVERB_APP_MAX_CONNECTIONS": "7", "REVERB_APP_MAX_MESSAGE_SIZE": "5000",
			"REVERB_APP_ACCEPT_CLIENT_EVENTS_FROM": "all",
		}, func(t *testing.T, c *Config) {
			a, b := c.Apps[0], c.Apps[1]
			if a.ID != "1" || a.Key != "new-key" || a.Secret != "new-secret" || a.PingInterval != 30 ||
				a.ActivityTimeout != 20 || a.MaxConnections != 7 || a.MaxMessageSize != 5000 || a.AcceptClientEventsFrom != "all" {
				t.Errorf("first app %+v", a)
			}
			if b.Key != "k2" || b.Secret != "s2" || b.PingInterval != 60 {
				t.Errorf("second app must not change: %+v", b)
			}
			if c.AppByKey("k1") != nil || c.AppByKey("new-key") != &c.Apps[0] {
				t.Error("index must use the overridden key")
			}
		}},
		{"scaling enabled with REDIS_URL", minimal, map[string]string{
			"REVERB_SCALING_ENABLED": "true", "REDIS_URL": "redis://r:6379/0", "REDIS_HOST": "ignored",
			"REVERB_SCALING_CHANNEL": "chan",
		}, func(t *testing.T, c *Config) {
			if !c.Scaling.Enabled || c.Scaling.RedisURL != "redis://r:6379/0" || c.Scaling.Channel != "chan" {
				t.Errorf("%+v", c.Scaling)
			}
		}},
		{"scaling disabled by (false)", "scaling: {enabled: true, redis_url: 'redis://x'}\n" + minimal,
			map[string]string{"REVERB_SCALING_ENABLED": "(false)"}, func(t *testing.T, c *Config) {
				if c.Scaling.Enabled {
					t.Error("still enabled")
				}
			}},
		{"REDIS_HOST builds url", minimal, map[string]string{
			"REVERB_SCALING_ENABLED": "1", "REDIS_HOST": "redis.internal", "REDIS_PORT": "6380", "REDIS_PASSWORD": "p@ss",
		}, func(t *testing.T, c *Config) {
			if c.Scaling.RedisURL != "redis://:p%40ss@redis.internal:6380" {
				t.Errorf("%q", c.Scaling.RedisURL)
			}
		}},
		{"REDIS_HOST alone uses default port", minimal, map[string]string{"REDIS_HOST": "h"},
			func(t *testing.T, c *Config) {
				if c.Scaling.RedisURL != "redis://h:6379" {
					t.Errorf("%q", c.Scaling.RedisURL)
				}
			}},
		{"REDIS_PORT patches file url", twoApps, map[string]string{"REDIS_PORT": "7001", "REDIS_DB": "5"},
			func(t *testing.T, c *Config) {
				if c.Scaling.RedisURL != "redis://fileuser:filepass@filehost:7001/5" {
					t.Errorf("%q", c.Scaling.RedisURL)
				}
			}},
		{"REDIS_CLUSTER lists seeds; Laravel's REDIS_HOST is then ignored", minimal, map[string]string{
			"REVERB_SCALING_ENABLED": "true", "REDIS_CLUSTER": "10.0.0.1:7000, 10.0.0.2:7001", "REDIS_HOST": "127.0.0.1",
			"REDIS_PORT": "6379", "REDIS_PASSWORD": "pw",
		}, func(t *testing.T, c *Config) {
			rc := c.Scaling.RedisCluster
			if c.Scaling.RedisURL != "" || len(rc.Addrs) != 2 || rc.Addrs[1] != "10.0.0.2:7001" || rc.Password != "pw" {
				t.Errorf("%+v", c.Scaling)
			}
		}},
		{"REDIS_CLUSTER=redis is Laravel's driver name, not a topology", minimal, map[string]string{
			"REDIS_CLUSTER": "redis", "REDIS_HOST": "h",
		}, func(t *testing.T, c *Config) {
			if c.Scaling.RedisCluster.Set() || c.Scaling.RedisURL != "redis://h:6379" {
				t.Errorf("%+v", c.Scaling)
			}
		}},
		{"sentinel from env", minimal, map[string]string{
			"REDIS_SENTINEL_HOST": "s1,s2:26380", "REDIS_SENTINEL_SERVICE": "main", "REDIS_PASSWORD": "pw", "REDIS_HOST": "127.0.0.1",
		}, func(t *testing.T, c *Config) {
			s := c.Scaling.RedisSentinel
			if c.Scaling.RedisURL != "" || s.MasterName != "main" || s.Password != "pw" ||
				len(s.Addrs) != 2 || s.Addrs[0] != "s1:26379" || s.Addrs[1] != "s2:26380" {
				t.Errorf("%+v", c.Scaling)
			}
		}},
		{"sentinel from file keeps REDIS_HOST out", "scaling: {enabled: true, redis_sentinel: {master_name: m, addrs: ['127.0.0.1:26379']}}\n" + minimal,
			map[string]string{"REDIS_HOST": "127.0.0.1", "REDIS_PORT": "6379"}, func(t *testing.T, c *Config) {
				if c.Scaling.RedisURL != "" || c.Scaling.NodeTimeout != 10 {
					t.Errorf("%+v", c.Scaling)
				}
			}},
		{"REDIS_HOST ipv6", minimal, map[string]string{"REDIS_HOST": "::1", "REDIS_USERNAME": "u"},
			func(t *testing.T, c *Config) {
				if c.Scaling.RedisURL != "redis://u@[::1]:6379" {
					t.Errorf("%q", c.Scaling.RedisURL)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := Load(writeFile(t, tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestEnvErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		want string
	}{
		{"port not a number", minimal, map[string]string{"REVERB_SERVER_PORT": "http"}, `REVERB_SERVER_PORT: "http" is not an integer`},
		{"port out of range", minimal, map[string]string{"REVERB_SERVER_PORT": "70000"}, "server.port: must be between 1 and 65535"},
		{"bool", minimal, map[string]string{"REVERB_SCALING_ENABLED": "maybe"}, "REVERB_SCALING_ENABLED"},
		{"app int", minimal, map[string]string{"REVERB_APP_MAX_CONNECTIONS": "many"}, "REVERB_APP_MAX_CONNECTIONS"},
		{"request size", minimal, map[string]string{"REVERB_MAX_REQUEST_SIZE": "1e4"}, "REVERB_MAX_REQUEST_SIZE"},
		{"scaling without redis", minimal, map[string]string{"REVERB_SCALING_ENABLED": "true"}, "scaling.redis_url: required"},
		{"partial app from env", "server: {port: 8080}\n", map[string]string{"REVERB_APP_KEY": "k"}, "apps[0].app_id: must not be empty"},
		{"bad enum from env", minimal, map[string]string{"REVERB_APP_ACCEPT_CLIENT_EVENTS_FROM": "x"}, "apps[0].accept_client_events_from"},
		{"redis port", minimal, map[string]string{"REDIS_PORT": "x"}, `REDIS_PORT: "x" is not a port number`},
		{"redis db", minimal, map[string]string{"REDIS_DB": "-1"}, "REDIS_DB"},
		{"redis pieces on unix url", "scaling: {redis_url: 'unix:///tmp/r.sock'}\n" + minimal,
			map[string]string{"REDIS_HOST": "h"}, "REDIS_HOST/REDIS_PORT/REDIS_PASSWORD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, err := Load(writeFile(t, tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
