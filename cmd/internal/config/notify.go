package config

import (
	"errors"
	"net/http"
	"strings"

	"github.com/splatd/splatd/uploader/notify"
)

// NotifyTarget is where the config sends events: notify.webhook with the headers
// of notify.webhook_headers_file (read now), and each watch entry's
// after.exec.
func (c *Config) NotifyTarget(token string) (notify.Target, error) {
	webhook, headers, err := c.notifyWebhook(token)
	return notify.Target{Webhook: webhook, Headers: headers, Exec: c.notifyExec()}, err
}

// notifyWebhook is the config's webhook and its headers (the file read now).
func (c *Config) notifyWebhook(token string) (string, http.Header, error) {
	var headers http.Header
	if f := c.Notify.WebhookHeadersFile; f != "" {
		var err error
		if headers, err = notify.ReadHeaders(f); err != nil {
			return "", nil, errors.New("notify.webhook_headers_file: " + err.Error())
		}
	}
	if err := checkNotifySecrets(string(c.Notify.Webhook), headers, token); err != nil {
		return "", nil, err
	}
	return string(c.Notify.Webhook), headers, nil
}

// notifyExec returns the after.exec command of a job's watch root: the
// entry's own after block over the global one.
func (c *Config) notifyExec() func(root string) notify.Command {
	command := func(a After) notify.Command {
		return notify.Command{Argv: a.Exec, Timeout: a.ExecTimeout.D()}
	}
	byRoot := make(map[string]notify.Command, len(c.Watch))
	for _, w := range c.Watch {
		byRoot[w.Path] = command(c.AfterFor(w))
	}
	global := command(c.After)
	return func(root string) notify.Command {
		if cmd, ok := byRoot[root]; ok {
			return cmd
		}
		return global
	}
}

// checkNotifySecrets refuses a webhook URL or header carrying the API token.
func checkNotifySecrets(webhook string, headers http.Header, token string) error {
	if token == "" {
		return nil
	}
	if strings.Contains(webhook, token) {
		return errors.New("notify.webhook: the URL holds the API token; give the webhook a secret of its own")
	}
	for name, vs := range headers {
		for _, v := range vs {
			if strings.Contains(v, token) {
				return errors.New("notify.webhook_headers_file: header " + name + " holds the API token; give the webhook a secret of its own")
			}
		}
	}
	return nil
}
