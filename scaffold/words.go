package scaffold

import "regexp"

var placeholder = regexp.MustCompile(`\$\{([^}]*)\}`)
