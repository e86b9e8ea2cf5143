package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/e2e/creds"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// A Publish caller is what an open-loop phase calls once per event.
type publishCaller func(ctx context.Context, req *rivorav1.PublishRequest) error

// connectCaller calls Publish with the generated Connect client (what the
// Go SDK does).
func connectCaller(c rivorav1connect.IngestServiceClient) publishCaller {
	return func(ctx context.Context, req *rivorav1.PublishRequest) error {
		_, err := c.Publish(ctx, connect.NewRequest(req))
		return err
	}
}

// leanCaller calls Publish over the same wire, the Connect protocol's
// unary call (POST /rivora.v1.IngestService/Publish, a protobuf body,
// HTTP/1.1 whatever -h2c says), with fasthttp's client: a load generator
// that costs the machine about a third less CPU per call than the
// generated client. The bench shares the server's two cores, so the open
// loop's p99 at 10k calls/s measures the server and its caller's CPU
// together; this caller leaves more of the cores to the server, as a
// publisher on its own machine would. It sends the headers the generated
// client sends that change what the server does: the call's deadline
// (Connect-Timeout-Ms) and Accept-Encoding: gzip.
func leanCaller(baseURL string, maxConns int) (publishCaller, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("lean caller: %s is not plain HTTP", baseURL)
	}
	hc := &fasthttp.HostClient{Addr: u.Host, MaxConns: maxConns, MaxIdleConnDuration: time.Minute}
	path := baseURL + rivorav1connect.IngestServicePublishProcedure
	auth := ""
	if token := creds.For(baseURL); token != "" {
		auth = "Bearer " + token
	}
	return func(ctx context.Context, req *rivorav1.PublishRequest) error {
		body, err := proto.Marshal(req)
		if err != nil {
			return err
		}
		rq, rs := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(rq)
		defer fasthttp.ReleaseResponse(rs)
		rq.SetRequestURI(path)
		rq.Header.SetMethod(fasthttp.MethodPost)
		rq.Header.SetContentType("application/proto")
		rq.Header.Set("Connect-Protocol-Version", "1")
		rq.Header.Set("Accept-Encoding", "gzip")
		if auth != "" {
			rq.Header.Set("Authorization", auth)
		}
		rq.SetBodyRaw(body)
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(time.Minute)
		}
		rq.Header.Set("Connect-Timeout-Ms", strconv.FormatInt(max(1, time.Until(deadline).Milliseconds()), 10))
		if err := hc.DoDeadline(rq, rs, deadline); err != nil {
			return err
		}
		if rs.StatusCode() != fasthttp.StatusOK {
			return fmt.Errorf("Publish answered HTTP %d: %s", rs.StatusCode(), rs.Body())
		}
		body, err = rs.BodyUncompressed()
		if err != nil {
			return fmt.Errorf("Publish answer: %w", err)
		}
		var resp rivorav1.PublishResponse
		if err := proto.Unmarshal(body, &resp); err != nil {
			return fmt.Errorf("Publish answer: %w", err)
		}
		if resp.GetEventId() == "" {
			return fmt.Errorf("Publish answered no event id")
		}
		return nil
	}, nil
}
