package catalog

import (
	"strconv"
	"strings"
)

// typeAliases maps the SQL spellings ParseDataType accepts to the type roots
// the original stores.
var typeAliases = map[string]string{
	"BOOLEAN": "BOOLEAN", "BOOL": "BOOLEAN",
	"TINYINT": "TINYINT", "SMALLINT": "SMALLINT",
	"INT": "INTEGER", "INTEGER": "INTEGER",
	"BIGINT": "BIGINT", "FLOAT": "FLOAT", "DOUBLE": "DOUBLE",
	"CHAR": "CHAR", "STRING": "STRING", "VARCHAR": "STRING",
	"DECIMAL": "DECIMAL", "DATE": "DATE",
	"TIME": "TIME_WITHOUT_TIME_ZONE", "TIME_WITHOUT_TIME_ZONE": "TIME_WITHOUT_TIME_ZONE",
	"TIMESTAMP": "TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITHOUT_TIME_ZONE": "TIMESTAMP_WITHOUT_TIME_ZONE",
	"TIMESTAMP_LTZ": "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE": "TIMESTAMP_WITH_LOCAL_TIME_ZONE",
	"BINARY": "BINARY", "BYTES": "BYTES", "VARBINARY": "BYTES",
}

// ParseDataType parses SQL-like type text: "INT", "BIGINT NOT NULL",
// "CHAR(10)", "DECIMAL(10, 2)", "TIMESTAMP(6)", "TIMESTAMP_LTZ(3)",
// "BYTES", case-insensitively. Errors wrap core.ErrInvalidArgument and name
// the text.
func ParseDataType(text string) (DataType, error) {
	s := strings.ToUpper(strings.TrimSpace(text))
	t := DataType{Nullable: true}
	if rest, ok := strings.CutSuffix(s, "NOT NULL"); ok {
		t.Nullable = false
		s = strings.TrimSpace(rest)
	} else if rest, ok := strings.CutSuffix(s, "NULL"); ok {
		s = strings.TrimSpace(rest)
	}
	name, params := s, ""
	if i := strings.IndexByte(s, '('); i >= 0 {
		if !strings.HasSuffix(s, ")") {
			return DataType{}, invalid("type %q: unbalanced parenthesis", text)
		}
		name, params = strings.TrimSpace(s[:i]), s[i+1:len(s)-1]
	}
	root, ok := typeAliases[name]
	if !ok {
		return DataType{}, invalid("type %q: unknown type %q (known: BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, CHAR(n), STRING, DECIMAL(p, s), DATE, TIME(p), TIMESTAMP(p), TIMESTAMP_LTZ(p), BINARY(n), BYTES)", text, name)
	}
	t.Type = root
	var nums []int32
	if params != "" {
		for _, p := range strings.Split(params, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
			if err != nil || n < 0 {
				return DataType{}, invalid("type %q: parameter %q is not a non-negative integer", text, strings.TrimSpace(p))
			}
			nums = append(nums, int32(n))
		}
	}
	switch root {
	case "CHAR", "BINARY":
		n := int32(1)
		if len(nums) > 1 {
			return DataType{}, invalid("type %q: takes one length", text)
		}
		if len(nums) == 1 {
			n = nums[0]
		}
		t.Length = &n
	case "DECIMAL":
		p, sc := int32(10), int32(0)
		if len(nums) > 2 {
			return DataType{}, invalid("type %q: takes a precision and a scale", text)
		}
		if len(nums) >= 1 {
			p = nums[0]
		}
		if len(nums) == 2 {
			sc = nums[1]
		}
		t.Precision, t.Scale = &p, &sc
	case "TIME_WITHOUT_TIME_ZONE", "TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE":
		p := int32(6)
		if root == "TIME_WITHOUT_TIME_ZONE" {
			p = 0
		}
		if len(nums) > 1 {
			return DataType{}, invalid("type %q: takes one precision", text)
		}
		if len(nums) == 1 {
			p = nums[0]
		}
		t.Precision = &p
	default:
		if len(nums) > 0 {
			return DataType{}, invalid("type %q: %s takes no parameters", text, root)
		}
	}
	if err := ValidateType(t); err != nil {
		return DataType{}, invalid("type %q: %v", text, err)
	}
	return t, nil
}
