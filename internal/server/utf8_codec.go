package server

import (
	"bytes"
	"crypto/rand"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/policyd/policyd/internal/validate"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Invalid UTF-8 in a proto3 string field fails proto.Unmarshal, and grpc-go
// answers any unmarshal error itself, before interceptors or handlers run,
// as INTERNAL "grpc: failed to unmarshal the received message: string field
// contains invalid UTF-8" (rpc_util.go recv), which neither names the field
// nor says the client is at fault. utf8Codec turns it into INVALID_ARGUMENT
// naming the field: it decodes such a request once more with the invalid
// bytes replaced by U+FFFD and marks the message with utf8MarkField, an
// unknown field holding the first bad field's path; statusInterceptor (and,
// for streams, utf8StreamInterceptor) answers a marked request with a
// *validate.FieldError before the handler sees it. Valid requests take grpc-go's
// codec unchanged; the check costs a look at the unknown fields.

// utf8MarkField is the field number of the mark: the largest a proto field
// may have, far from any policyd field.
const utf8MarkField protowire.Number = protowire.MaxValidNumber

// maxUTF8Depth bounds the nesting sanitizeUTF8 follows; policyd's messages
// nest a few levels.
const maxUTF8Depth = 32

// utf8Codec is a grpc encoding.CodecV2, grpc-go's "proto" codec with the
// invalid-UTF-8 handling described above; installed per server with
// grpc.ForceServerCodecV2, so clients in the same process are untouched.
type utf8Codec struct{ encoding.CodecV2 }

func newUTF8Codec() utf8Codec { return utf8Codec{encoding.GetCodecV2("proto")} }

// markNonce starts every mark this process makes: a client can send a
// field numbered utf8MarkField too, but not guess the nonce, so it cannot
// choose the error text its own call is answered with.
var markNonce = func() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on a supported platform
	}
	return string(b[:])
}()

// Unmarshal decodes data into v; see utf8Codec. A message that is not
// valid protobuf at all is marked too, as the request's fault
// (INVALID_ARGUMENT naming "request"), not grpc-go's INTERNAL.
func (c utf8Codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	var u8 interface{ InvalidUTF8() bool }
	if errors.As(err, &u8) && u8.InvalidUTF8() {
		clean, bad, serr := sanitizeUTF8(data.Materialize(), m.ProtoReflect().Descriptor(), "", 0)
		if serr == nil && bad != nil && proto.Unmarshal(clean, m) == nil {
			mark(m, bad)
			return nil
		}
	}
	proto.Reset(m)
	mark(m, &validate.FieldError{Field: "request", Description: "not a valid protobuf message of its type"})
	return nil
}

// mark adds the mark of fe to m.
func mark(m proto.Message, fe *validate.FieldError) {
	b := protowire.AppendTag(nil, utf8MarkField, protowire.BytesType)
	b = protowire.AppendString(b, markNonce+fe.Field+"\x00"+fe.Description)
	r := m.ProtoReflect()
	r.SetUnknown(append(r.GetUnknown(), b...))
}

// invalidUTF8 returns the *validate.FieldError utf8Codec marked req with, or nil.
func invalidUTF8(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	u := m.ProtoReflect().GetUnknown()
	for len(u) > 0 {
		num, typ, n := protowire.ConsumeTag(u)
		if n < 0 {
			return nil
		}
		u = u[n:]
		if num == utf8MarkField && typ == protowire.BytesType {
			v, _ := protowire.ConsumeString(u)
			if rest, ours := strings.CutPrefix(v, markNonce); ours {
				field, desc, _ := strings.Cut(rest, "\x00")
				return &validate.FieldError{Field: field, Description: desc}
			}
		}
		if n = protowire.ConsumeFieldValue(num, typ, u); n < 0 {
			return nil
		}
		u = u[n:]
	}
	return nil
}

// sanitizeUTF8 returns the wire-format message b of descriptor md with
// invalid UTF-8 in its string fields (nested ones included) replaced by
// U+FFFD, and the first such field as a *validate.FieldError whose path starts with
// prefix. An error means b is malformed; the caller keeps its first error.
func sanitizeUTF8(b []byte, md protoreflect.MessageDescriptor, prefix string, depth int) ([]byte, *validate.FieldError, error) {
	if depth > maxUTF8Depth {
		return nil, nil, errors.New("nested too deeply")
	}
	out := make([]byte, 0, len(b))
	var first *validate.FieldError
	counts := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, nil, protowire.ParseError(n)
		}
		tag := b[:n]
		b = b[n:]
		vn := protowire.ConsumeFieldValue(num, typ, b)
		if vn < 0 {
			return nil, nil, protowire.ParseError(vn)
		}
		val := b[:vn]
		b = b[vn:]
		fd := md.Fields().ByNumber(num)
		if fd == nil || typ != protowire.BytesType {
			out = append(append(out, tag...), val...)
			continue
		}
		path := fd.TextName()
		if prefix != "" {
			path = prefix + "." + path
		}
		if fd.IsList() {
			path += "[" + strconv.Itoa(counts[num]) + "]"
			counts[num]++
		}
		inner, _ := protowire.ConsumeBytes(val)
		var bad *validate.FieldError
		switch {
		case fd.IsMap():
			var err error
			if inner, bad, err = sanitizeMapEntry(inner, fd, path); err != nil {
				return nil, nil, err
			}
		case fd.Kind() == protoreflect.StringKind:
			if !utf8.Valid(inner) {
				inner = bytes.ToValidUTF8(inner, []byte("\uFFFD"))
				bad = &validate.FieldError{Field: path, Description: "not valid UTF-8"}
			}
		case fd.Kind() == protoreflect.MessageKind:
			var err error
			if inner, bad, err = sanitizeUTF8(inner, fd.Message(), path, depth+1); err != nil {
				return nil, nil, err
			}
		}
		if first == nil {
			first = bad
		}
		out = protowire.AppendBytes(append(out, tag...), inner)
	}
	return out, first, nil
}

// sanitizeMapEntry is sanitizeUTF8 for an entry of the map field fd at
// path: a bad key is reported as the map ("a key is not valid UTF-8"), a
// bad value under its key, e.g. failure.headers["retry-after"].
func sanitizeMapEntry(b []byte, fd protoreflect.FieldDescriptor, path string) ([]byte, *validate.FieldError, error) {
	clean, bad, err := sanitizeUTF8(b, fd.Message(), "", 1)
	if err != nil || bad == nil {
		return clean, bad, err
	}
	if bad.Field == "key" {
		return clean, &validate.FieldError{Field: path, Description: "a key is not valid UTF-8"}, nil
	}
	key := ""
	for e := clean; len(e) > 0; {
		num, typ, n := protowire.ConsumeTag(e)
		if n < 0 {
			break
		}
		e = e[n:]
		vn := protowire.ConsumeFieldValue(num, typ, e)
		if vn < 0 {
			break
		}
		if num == 1 && typ == protowire.BytesType {
			k, _ := protowire.ConsumeString(e[:vn])
			key = k
		}
		e = e[vn:]
	}
	return clean, &validate.FieldError{Field: path + "[" + strconv.Quote(validate.Truncate(key, 64)) + "]", Description: "not valid UTF-8"}, nil
}

// utf8StreamInterceptor answers a streamed message utf8Codec marked with
// its *validate.FieldError, as statusInterceptor does for unary calls.
func utf8StreamInterceptor(logger *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, utf8Stream{ServerStream: ss, logger: logger, method: info.FullMethod})
	}
}

type utf8Stream struct {
	grpc.ServerStream
	logger *slog.Logger
	method string
}

func (s utf8Stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := invalidUTF8(m); err != nil {
		return toStatus(s.Context(), s.logger, s.method, err)
	}
	return nil
}
