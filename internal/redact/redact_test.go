package redact

import "testing"

func TestURLMasksPasswordAndSecretOptions(t *testing.T) {
	for raw, want := range map[string]string{
		"amqp://guest:guest@h:5672/?exchange=outbox&routing_key=%7Baggregate_type%7D.events": "amqp://guest:xxxxx@h:5672/?exchange=outbox&routing_key=%7Baggregate_type%7D.events",
		"https://h/x?sign_secret_env=GW&token=abc":                                           "https://h/x?sign_secret_env=GW&token=xxxxx",
		"https://h/x?API_KEY=abc":                                                            "https://h/x?API_KEY=xxxxx",
		"redis://:r3dis-pw@127.0.0.1:6379/0":                                                 "redis://:xxxxx@127.0.0.1:6379/0",
		"kafka://broker:9092":                                                                "kafka://broker:9092",
		"http://h/%zz":                                                                       "(unparseable URL)",
	} {
		if got := URL(raw); got != want {
			t.Errorf("URL(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestIsSecretKey(t *testing.T) {
	for k, want := range map[string]bool{
		"password": true, "Token": true, "sign_secret": true,
		"sign_secret_env": false, "routing_key": false, "topic": false,
	} {
		if got := IsSecretKey(k); got != want {
			t.Errorf("IsSecretKey(%q) = %v, want %v", k, got, want)
		}
	}
}
