package explore

import "slices"

func sortStrings(s []string) { slices.Sort(s) }
