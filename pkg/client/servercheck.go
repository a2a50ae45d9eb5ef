package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/dlbproject/dlb/pkg/api"
)

// ServerCheck asks dlbd to check the server target (VIP@PORT@SERVER)
// from the dispatcher; client, if not empty, is a client address to probe
// from as well.
func (c *Client) ServerCheck(ctx context.Context, target, client string) (api.ServerCheckReport, error) {
	var r api.ServerCheckReport
	q := url.Values{"target": {target}}
	if client != "" {
		q.Set("client", client)
	}
	err := c.do(ctx, http.MethodGet, api.PathServerCheck+"?"+q.Encode(), "", nil, &r)
	return r, err
}
