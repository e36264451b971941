package server

import (
	"context"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

const (
	mAppendDelta   = "AppendDelta"
	mFinishMessage = "FinishMessage"
)

// AppendDelta implements SessionStoreService.
func (s *Server) AppendDelta(ctx context.Context, req *sessiondv1.AppendDeltaRequest) (*sessiondv1.AppendDeltaResponse, error) {
	return withRef(s, mAppendDelta, req.GetRef(), func(ref storage.Ref) (*sessiondv1.AppendDeltaResponse, error) {
		res, err := s.store.AppendDelta(ctx, storage.DeltaRequest{Ref: ref, Delta: &sessiondv1.MessageDelta{
			MessageId: req.GetMessageId(), Offset: req.GetOffset(), Content: req.GetContent(),
			ReasoningOffset: req.GetReasoningOffset(), Reasoning: req.GetReasoning(), Usage: req.GetUsage(),
		}})
		return &sessiondv1.AppendDeltaResponse{Revision: res.Revision, Length: res.Length, ReasoningLength: res.ReasoningLength}, err
	})
}

// FinishMessage implements SessionStoreService.
func (s *Server) FinishMessage(ctx context.Context, req *sessiondv1.FinishMessageRequest) (*sessiondv1.FinishMessageResponse, error) {
	return withRef(s, mFinishMessage, req.GetRef(), func(ref storage.Ref) (*sessiondv1.FinishMessageResponse, error) {
		res, err := s.store.FinishMessage(ctx, storage.FinishRequest{Ref: ref, MessageID: req.GetMessageId(),
			ToolCalls: req.GetToolCalls(), Usage: req.GetUsage(), Model: req.GetModel(), State: req.GetState()})
		return &sessiondv1.FinishMessageResponse{Revision: res.Revision, Message: res.Message}, err
	})
}
