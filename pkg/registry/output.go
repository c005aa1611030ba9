package registry

// validateOutput checks a lossless success value against the tool's compiled output schema
// (SCH-12); nil schema accepts any value. Violations use the root path `value`.
func validateOutput(s *Schema, val []byte) []string {
	if s == nil || (s.typ == "" && len(s.oneOf) == 0 && !s.hasConst && s.enum == nil) {
		return nil
	}
	if s.typ == "string" && s.enum == nil && !s.hasConst && val[0] == '"' {
		return nil
	}
	v, err := decodeValue(val)
	if err != nil {
		return []string{`"value" must be lossless JSON`}
	}
	return s.validate(v, rootValue, true)
}
