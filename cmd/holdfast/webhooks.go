package main

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/holdfast/holdfast/engine"
)

// startWebhooks starts the delivery of the event feed to --webhook-url, signed with the
// whsec_ secret in --webhook-secret-file (engine.DeliverWebhooks: one replica delivers
// at a time, whatever the number that run this). stop ends it and gives its lease up.
// Without --webhook-url it does nothing.
func startWebhooks(ctx context.Context, e *engine.Engine, rawURL, secretFile string, log *slog.Logger) (stop func(), err error) {
	if rawURL == "" {
		if secretFile != "" {
			return nil, usageErr("--webhook-secret-file needs --webhook-url")
		}
		return func() {}, nil
	}
	if secretFile == "" {
		return nil, usageErr("--webhook-url needs --webhook-secret-file (a whsec_ secret)")
	}
	data, err := os.ReadFile(secretFile)
	if err != nil {
		return nil, usageErr("--webhook-secret-file: %v", err)
	}
	cfg := engine.WebhookConfig{URL: rawURL, Secret: strings.TrimSpace(string(data))}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, usageErr("--webhook-url is not a URL")
	}
	if err := cfg.Validate(); err != nil {
		return nil, usageErr("--webhook-url/--webhook-secret-file: %v", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.DeliverWebhooks(ctx, cfg) })
	log.Info("delivering events to a webhook", "host", u.Host) // not the URL: it may carry a secret
	return func() { cancel(); wg.Wait() }, nil
}
