package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/dlbproject/dlb/pkg/api"
)

// ConfigFile returns the configuration as a configuration file, in
// format api.FormatYAML or api.FormatJSON: "dlbctl get".
func (c *Client) ConfigFile(ctx context.Context, format string) ([]byte, error) {
	var s scriptText
	err := c.do(ctx, http.MethodGet, api.PathConfig+"?format="+url.QueryEscape(format), "", nil, &s)
	return []byte(s), err
}

// ApplyConfig sends a configuration file (YAML or JSON): dlbd makes its
// configuration equal to it, all or none, or with dryRun only says what
// it would change. A refused file is a *RefusedError whose API error
// names the line and the field's path.
func (c *Client) ApplyConfig(ctx context.Context, file []byte, dryRun bool) (api.ConfigResult, error) {
	path := api.PathConfig
	if dryRun {
		path += "?dry_run=true"
	}
	var res api.ConfigResult
	err := c.do(ctx, http.MethodPost, path, "", rawBody(file), &res)
	return res, err
}

// rawBody is a request body sent as it is, not encoded as JSON.
type rawBody []byte
