package htmlreport

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/outboxdrill/runner/report"
)

// The timeline's geometry, in pixels: a time column, then the lanes side
// by side, a row per line of the timeline. Labels are set in an 11px
// monospace font, charW wide a character.
const (
	timeCol   = 150
	laneW     = 190
	headH     = 50
	rowH      = 22
	charW     = 6.7
	minLabel  = 44 // an arrow's label may run past its ends up to this many characters
	markSize  = 5
	arrowTail = 7   // the arrowhead's room before a lane's line
	rightRoom = 120 // past the last lane: a mark's label there
)

// svgView is one timeline laid out.
type svgView struct {
	ID            string
	Width, Height int
	Lanes         []svgLane
	Rows          []svgRow
	Settle        []svgRect
	Cut           int
}

type svgLane struct {
	X, Y1, Y2, TopX int
	Title, Detail   string
	Kind            string
	Killed          bool
}

type svgRect struct{ Y, H int }

type svgRow struct {
	Y, LabelY      int
	Time           string
	Kind, Class    string
	X1, X2, LabelX int
	Anchor         string
	Label, Full    string
	Witness        string // the ids of the violations resting on it, for the script
	FaultX         int
	Fault          string
}

// layout places t's lanes and rows; every string is cleaned here.
func layout(c cleaner, t *report.Timeline, id string) *svgView {
	v := &svgView{ID: id, Width: timeCol + len(t.Lanes)*laneW + rightRoom, Height: headH + len(t.Rows)*rowH + rowH, Cut: t.Cut}
	for i, l := range t.Lanes {
		x := laneX(i)
		sl := svgLane{X: x, TopX: x - laneW/2 + 6, Title: c.name(l.Title), Detail: c.line(l.Detail), Kind: l.Kind, Killed: l.Killed,
			Y1: rowY(l.From) - rowH/2, Y2: rowY(l.To) + rowH/2}
		v.Lanes = append(v.Lanes, sl)
	}
	for i, row := range t.Rows {
		v.Rows = append(v.Rows, placeRow(c, t, i, row, v.Width, id))
	}
	v.Settle = settleRects(t)
	return v
}

func laneX(i int) int { return timeCol + i*laneW + laneW/2 }
func rowY(i int) int  { return headH + i*rowH + rowH/2 }

func placeRow(c cleaner, t *report.Timeline, i int, row report.Row, width int, id string) svgRow {
	y := rowY(i)
	full := c.line(row.Text)
	if row.Count > 1 {
		full = fmt.Sprintf("%s ×%d", full, row.Count)
	}
	sr := svgRow{Y: y, LabelY: y - 4, Kind: row.Kind, Full: full, Anchor: "start"}
	if row.Timed {
		sr.Time = report.At(row.At)
		if row.Count > 1 {
			sr.Time += "…"
		}
	}
	classes := []string{row.Kind}
	switch row.Kind {
	case report.RowBand:
		sr.X1, sr.X2, sr.LabelX, sr.LabelY = timeCol-4, width-4, timeCol+4, y+4
		sr.Label = fit(full, float64(width-timeCol-8))
	case report.RowMark:
		// Its label runs right of the lane, or left where more room is.
		sr.X1 = laneX(row.From)
		sr.LabelX, sr.LabelY = sr.X1+markSize+4, y+4
		room := width - sr.LabelX - 4
		if left := sr.X1 - markSize - 4 - timeCol; left > room && fit(full, float64(room)) != full {
			sr.LabelX, sr.Anchor, room = sr.X1-markSize-4, "end", left
		}
		sr.Label = fit(full, float64(room))
	default:
		sr.X1, sr.X2 = arrowEnds(row.From, row.To)
		sr.LabelX, sr.Anchor = (sr.X1+sr.X2)/2, "middle"
		room := max(float64(abs(sr.X2-sr.X1))-8, minLabel*charW)
		sr.Label = fit(full, room)
	}
	if row.Reply {
		classes = append(classes, "reply")
	}
	if row.Fault != "" {
		classes = append(classes, "fault")
		sr.Fault = c.line("fault " + row.Fault)
		sr.FaultX = laneX(row.To)
	}
	if row.Fail {
		classes = append(classes, "fail")
	}
	if len(row.Witness) > 0 {
		classes = append(classes, "witness")
		ids := make([]string, len(row.Witness))
		for k, vi := range row.Witness {
			ids[k] = fmt.Sprintf("%s-v%d", id, vi)
		}
		sr.Witness = strings.Join(ids, " ")
	}
	sr.Class = strings.Join(classes, " ")
	return sr
}

// arrowEnds are an arrow's x from one lane to another, its head short of
// the target's line.
func arrowEnds(from, to int) (int, int) {
	x1, x2 := laneX(from), laneX(to)
	switch {
	case x2 > x1:
		x2 -= arrowTail
	case x2 < x1:
		x2 += arrowTail
	}
	return x1, x2
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// fit cuts s to what room (pixels) holds, marking the cut.
func fit(s string, room float64) string {
	n := int(room / charW)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:max(n-1, 1)]) + "…"
}

// settleRects are the settle window's extent: its runs of rows.
func settleRects(t *report.Timeline) []svgRect {
	var out []svgRect
	start := -1
	for i := 0; i <= len(t.Rows); i++ {
		in := i < len(t.Rows) && t.Rows[i].Settling
		switch {
		case in && start < 0:
			start = i
		case !in && start >= 0:
			out = append(out, svgRect{Y: rowY(start) - rowH/2, H: (i - start) * rowH})
			start = -1
		}
	}
	return out
}
