package controlplane

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/errkind"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// tokenHandler serves rivora.v1.TokenService (admin only, by
// auth.Policies, but for WhoAmI). Like adminHandler it only translates, and never answers
// a token's hash: the token itself once, in the answer to create.
type tokenHandler struct {
	cp *ControlPlane
}

func (h *tokenHandler) CreateToken(ctx context.Context, req *connect.Request[rivorav1.CreateTokenRequest]) (*connect.Response[rivorav1.CreateTokenResponse], error) {
	token, t, version, err := h.cp.createToken(req.Msg, caller(ctx))
	if err != nil {
		return nil, err
	}
	info := proto.Clone(t).(*rivorav1.ApiToken)
	info.Hash = ""
	return connect.NewResponse(&rivorav1.CreateTokenResponse{TokenInfo: info, Token: token, Version: version}), nil
}

func (h *tokenHandler) ListTokens(ctx context.Context, req *connect.Request[rivorav1.ListTokensRequest]) (*connect.Response[rivorav1.ListTokensResponse], error) {
	return connect.NewResponse(&rivorav1.ListTokensResponse{Tokens: h.cp.tokens()}), nil
}

func (h *tokenHandler) WhoAmI(ctx context.Context, _ *connect.Request[rivorav1.WhoAmIRequest]) (*connect.Response[rivorav1.WhoAmIResponse], error) {
	p := auth.FromContext(ctx)
	if p == nil {
		return nil, errorf(errkind.Unauthenticated, "no token on this call")
	}
	for _, t := range h.cp.tokens() {
		if t.GetId() == p.TokenID {
			return connect.NewResponse(&rivorav1.WhoAmIResponse{Token: t}), nil
		}
	}
	// Authenticated just now, so in force; only its record is missing
	// (the admin token a file store bootstraps, say): what the call knows.
	return connect.NewResponse(&rivorav1.WhoAmIResponse{Token: &rivorav1.ApiToken{Id: p.TokenID, Name: p.Name, Role: p.Role, Customers: p.Customers}}), nil
}

func (h *tokenHandler) RevokeToken(ctx context.Context, req *connect.Request[rivorav1.RevokeTokenRequest]) (*connect.Response[rivorav1.RevokeTokenResponse], error) {
	version, err := h.cp.revokeToken(req.Msg.GetId(), caller(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.RevokeTokenResponse{Version: version}), nil
}
