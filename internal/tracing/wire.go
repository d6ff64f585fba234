package tracing

// The protobuf wire format, as much of it as OTLP's traces use
// (protobuf.dev/programming-guides/encoding): a field is a tag (its number
// and wire type, as a varint) and a value; varints are little-endian
// base-128; fixed values little-endian; bytes, strings and messages are
// length-prefixed.

type wireNumber uint64

type wireType uint64

const (
	wireVarint  wireType = 0
	wireFixed64 wireType = 1
	wireBytes   wireType = 2
	wireFixed32 wireType = 5
)

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendTag(b []byte, num wireNumber, t wireType) []byte {
	return appendVarint(b, uint64(num)<<3|uint64(t))
}

func appendBytes(b, v []byte) []byte {
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendString(b []byte, v string) []byte {
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendFixed64(b []byte, v uint64) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
}

func appendFixed32(b []byte, v uint32) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

func encodeBool(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}
