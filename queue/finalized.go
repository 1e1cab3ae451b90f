package queue

// finalizedRecord reports whether raw, a stored job, has "finalized": true
// among its own keys; a nested object's keys (a sidecar's settings) do not
// count. It reads raw without decoding it (a start looks at every final
// job); what it cannot read is not finalized, so that the caller decodes it.
func finalizedRecord(raw []byte) bool {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return false
	}
	for i++; ; i++ {
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] != '"' {
			return false
		}
		end := stringEnd(raw, i)
		if end < 0 {
			return false
		}
		key := raw[i+1 : end-1]
		if i = skipSpace(raw, end); i >= len(raw) || raw[i] != ':' {
			return false
		}
		i = skipSpace(raw, i+1)
		vend := valueEnd(raw, i)
		if vend < 0 {
			return false
		}
		if string(key) == "finalized" && string(raw[i:vend]) == "true" {
			return true
		}
		if i = skipSpace(raw, vend); i >= len(raw) || raw[i] != ',' {
			return false // '}': the last key, or not JSON
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the index after the string that starts at b[i] ('"'), or -1.
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// valueEnd is the index after the JSON value that starts at b[i], or -1.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				if i = stringEnd(b, i); i < 0 {
					return -1
				}
				i--
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	for j := i; j < len(b); j++ {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
	}
	return len(b)
}
