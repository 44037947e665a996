package cacheprefix

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/sluice-dev/sluice/internal/format/rawjson"
)

// Inject returns params with one cache_control breakpoint on the unit at
// (the end of the prefix; ttl "" or "5m" for the default five minutes,
// "1h" for an hour). A string system prompt or message content becomes
// one text block so that it can carry the breakpoint; every other byte of
// a member is kept as written. params itself is not modified.
func Inject(params []byte, at Place, ttl string) ([]byte, error) {
	cc := []byte(`{"type":"ephemeral"}`)
	switch ttl {
	case "", "5m":
	case "1h":
		cc = []byte(`{"type":"ephemeral","ttl":"1h"}`)
	default:
		return nil, fmt.Errorf("cacheprefix: ttl %q: want 5m or 1h", ttl)
	}
	var field string
	switch at.Kind {
	case Tools:
		field = "tools"
	case System:
		field = "system"
	case Message:
		field = "messages"
	default:
		return nil, fmt.Errorf("cacheprefix: no place to inject (kind %d)", at.Kind)
	}
	found := false
	out, err := editObject(params, func(key string, val []byte) ([]byte, error) {
		if key != field {
			return val, nil
		}
		found = true
		switch at.Kind {
		case Tools:
			return editLast(val, func(tool []byte) ([]byte, error) { return withMember(tool, cc) })
		case System:
			return markBlock(val, at.Block, cc)
		default:
			return editElement(val, at.Msg, func(m []byte) ([]byte, error) {
				return editObject(m, func(k string, v []byte) ([]byte, error) {
					if k != "content" {
						return v, nil
					}
					return markBlock(v, at.Block, cc)
				})
			})
		}
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("cacheprefix: params has no %s", field)
	}
	return out, nil
}

// markBlock puts cc on block i of a system prompt or message content: a
// string becomes a one-block array.
func markBlock(val []byte, i int, cc []byte) ([]byte, error) {
	if val[0] == '"' {
		if i != 0 {
			return nil, fmt.Errorf("cacheprefix: block %d of a string", i)
		}
		var b bytes.Buffer
		b.WriteString(`[{"type":"text","text":`)
		b.Write(val)
		b.WriteString(`,"cache_control":`)
		b.Write(cc)
		b.WriteString(`}]`)
		return b.Bytes(), nil
	}
	return editElement(val, i, func(block []byte) ([]byte, error) { return withMember(block, cc) })
}

// withMember returns the object obj with "cache_control": cc added last.
func withMember(obj []byte, cc []byte) ([]byte, error) {
	if obj[0] != '{' {
		return nil, fmt.Errorf("cacheprefix: a breakpoint needs an object, got %.20s", obj)
	}
	body := bytes.TrimSpace(obj[1 : len(obj)-1])
	var b bytes.Buffer
	b.WriteByte('{')
	b.Write(body)
	if len(body) > 0 {
		b.WriteByte(',')
	}
	b.WriteString(`"cache_control":`)
	b.Write(cc)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// editObject rebuilds the object obj with each member's value passed
// through edit (keys re-encoded, values as edit returns them).
func editObject(obj []byte, edit func(key string, val []byte) ([]byte, error)) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range rawjson.Members(obj) {
		v, err := edit(m.Key(), m.Val)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.Key())
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// editElement rebuilds the array arr with element i passed through edit.
func editElement(arr []byte, i int, edit func([]byte) ([]byte, error)) ([]byte, error) {
	if arr[0] != '[' {
		return nil, fmt.Errorf("cacheprefix: want an array, got %.20s", arr)
	}
	els := rawjson.Elements(arr)
	if i < 0 || i >= len(els) {
		return nil, fmt.Errorf("cacheprefix: element %d of %d", i, len(els))
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for j, e := range els {
		if j > 0 {
			b.WriteByte(',')
		}
		if j == i {
			v, err := edit(e)
			if err != nil {
				return nil, err
			}
			e = v
		}
		b.Write(e)
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// editLast is editElement on the last element.
func editLast(arr []byte, edit func([]byte) ([]byte, error)) ([]byte, error) {
	if arr[0] != '[' {
		return nil, fmt.Errorf("cacheprefix: want an array, got %.20s", arr)
	}
	return editElement(arr, len(rawjson.Elements(arr))-1, edit)
}
