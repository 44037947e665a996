package keys

import (
	"context"
	"encoding"
	"fmt"
	"log/slog"
)

// RedactingHandler wraps h so that a record's message and every attribute
// value — strings, errors, anything that prints — pass through redact
// (usually [Pool.Redact]) before h sees them. Lower layers log raw error
// bodies and URL errors; with this under every logger, a key value that
// reaches one never reaches the log.
func RedactingHandler(h slog.Handler, redact func(string) string) slog.Handler {
	return &redactHandler{h: h, redact: redact}
}

type redactHandler struct {
	h      slog.Handler
	redact func(string) string
}

func (r *redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r *redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, r.redact(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.attr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

func (r *redactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = r.attr(a)
	}
	return &redactHandler{h: r.h.WithAttrs(red), redact: r.redact}
}

func (r *redactHandler) WithGroup(name string) slog.Handler {
	return &redactHandler{h: r.h.WithGroup(name), redact: r.redact}
}

// attr redacts a's value; a value whose printed form holds nothing to
// redact keeps its type.
func (r *redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(r.redact(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]slog.Attr, len(g))
		for i, x := range g {
			red[i] = r.attr(x)
		}
		a.Value = slog.GroupValue(red...)
	case slog.KindAny:
		a.Value = v
		forms := printed(v.Any())
		for _, f := range forms {
			if r.redact(f) != f {
				a.Value = slog.StringValue(r.redact(forms[0]))
				break
			}
		}
	default:
		a.Value = v
	}
	return a
}

// printed is the forms a handler may print x in, the text handler's
// first: a []byte as text, a TextMarshaler by MarshalText, an error by
// Error, anything by %+v. The check must see what the output would hold,
// not fmt's default form ([]byte prints as numbers).
func printed(x any) []string {
	plain := fmt.Sprintf("%+v", x)
	switch v := x.(type) {
	case []byte:
		return []string{string(v)}
	case encoding.TextMarshaler:
		if b, err := v.MarshalText(); err == nil {
			return []string{string(b), plain}
		}
	case error:
		return []string{v.Error(), plain}
	}
	return []string{plain}
}
