package server

import (
	"context"
	"sync/atomic"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/classifier"
)

// PolicyServer implements policydv1.PolicyServiceServer on a classifier.
// The classifier sits behind an atomic pointer so that a policy reload can
// swap it with SetClassifier while requests are in flight: each request
// uses the classifier that was current when it started.
type PolicyServer struct {
	policydv1.UnimplementedPolicyServiceServer

	classifier atomic.Pointer[classifier.Classifier]
}

// NewPolicyServer returns a PolicyServer that classifies with c, which must
// not be nil.
func NewPolicyServer(c *classifier.Classifier) *PolicyServer {
	s := &PolicyServer{}
	s.SetClassifier(c)
	return s
}

// SetClassifier makes c, which must not be nil, the classifier for requests
// that start from now on. It is safe to call concurrently with Classify.
func (s *PolicyServer) SetClassifier(c *classifier.Classifier) {
	if c == nil {
		panic("server: nil classifier")
	}
	s.classifier.Store(c)
}

// Classify validates req (see ValidateClassifyRequest) and classifies its
// failure. A validation error is returned as is; NewGRPCServer's interceptor
// turns it into codes.InvalidArgument.
func (s *PolicyServer) Classify(_ context.Context, req *policydv1.ClassifyRequest) (*policydv1.ClassifyResponse, error) {
	if err := ValidateClassifyRequest(req); err != nil {
		return nil, err
	}
	c := s.classifier.Load().Classify(req.GetFailure(), req.GetOptions(), req.GetProfile())
	return &policydv1.ClassifyResponse{Classification: c}, nil
}
