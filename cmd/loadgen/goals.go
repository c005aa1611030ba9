package main

import "time"

// The goals of the summary (issue 20, "turn cost, second cut"). Each is a ratio to the plain
// in-process loop of the same run at the same concurrency, but the first-turn goal, which is a
// ratio to the case's own warm turns.

// ratioGoals bound the durable HTTP+SSE p50 over the loop's p50, at every concurrency, by turn.
var ratioGoals = map[string]float64{"text": 4, "tools:1": 4, "tools:16": 2, "steps:20": 1.5}

// throughputGoals are the least durable turns/s over the loop's, by turn, at
// throughputGoalSessions only.
var throughputGoals = map[string]float64{"text": 0.25}

const throughputGoalSessions = 8

// cpuGoal bounds the server's CPU per durable turn over the loop's CPU per turn, every case.
const cpuGoal = 3.0

// firstTurnCPUGoal bounds the server's CPU per first turn of a session (the fresh-session turns)
// over its CPU per warm turn (a session's second turn), every case.
const firstTurnCPUGoal = 1.2

// The names of the goals.
const (
	goalRatio        = "ratio"        // durable p50 / loop p50
	goalThroughput   = "turnsPerSec"  // durable turns/s / loop turns/s
	goalCPU          = "serverCpu"    // server CPU per turn / loop CPU per turn
	goalFirstTurnCPU = "firstTurnCpu" // server CPU per first turn / per warm turn
)

// Goal is one goal of a case and how the case fared.
type Goal struct {
	Name    string  `json:"name"`
	Value   float64 `json:"value"` // the measured ratio
	Limit   float64 `json:"limit"`
	AtLeast bool    `json:"atLeast,omitempty"` // Value is to be >= Limit, else <= Limit
	Met     bool    `json:"met"`
}

// quotient is a/b, or 0 when either is not measured (zero or less).
func quotient(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return a / b
}

func durQuotient(a, b time.Duration) float64 { return quotient(float64(a), float64(b)) }

// evaluate computes the ratios of c from what it measured and the goals that apply to it. A goal
// whose ratio was not measured (no loop baseline, no CPU reading, no warm turns) is left out; so is
// the CPU goal when the loop's CPU includes the mock model's (the mock served from this process).
func evaluate(c *Case) {
	c.Ratio, c.DirectRatio, c.ThroughputRatio, c.CPURatio = 0, 0, 0, 0
	if c.InProcess != nil {
		c.Ratio = durQuotient(c.HTTP.Latency.P50, c.InProcess.Latency.P50)
		c.ThroughputRatio = quotient(c.HTTP.TurnsPerSec, c.InProcess.TurnsPerSec)
		if !c.InProcess.CPUIncludesMock {
			c.CPURatio = durQuotient(c.CPU.ServerPerTurn, c.InProcess.CPUPerTurn)
		}
	}
	if c.Direct != nil {
		c.DirectRatio = durQuotient(c.HTTP.Latency.P50, c.Direct.Latency.P50)
	}
	if w := c.Warm; w != nil {
		w.CPURatio = durQuotient(c.CPU.ServerPerTurn, w.CPU.ServerPerTurn)
		w.P50Ratio = durQuotient(c.HTTP.Latency.P50, w.HTTP.Latency.P50)
	}

	c.Goals = nil
	add := func(name string, value, limit float64, atLeast bool) {
		if value <= 0 {
			return
		}
		met := value <= limit
		if atLeast {
			met = value >= limit
		}
		c.Goals = append(c.Goals, Goal{Name: name, Value: value, Limit: limit, AtLeast: atLeast, Met: met})
	}
	turn := normScript(c.Turn)
	if g, ok := ratioGoals[turn]; ok {
		add(goalRatio, c.Ratio, g, false)
	}
	if g, ok := throughputGoals[turn]; ok && c.Sessions == throughputGoalSessions {
		add(goalThroughput, c.ThroughputRatio, g, true)
	}
	add(goalCPU, c.CPURatio, cpuGoal, false)
	if c.Warm != nil {
		add(goalFirstTurnCPU, c.Warm.CPURatio, firstTurnCPUGoal, false)
	}
}

// goal returns c's goal of that name, or nil.
func (c *Case) goal(name string) *Goal {
	for i := range c.Goals {
		if c.Goals[i].Name == name {
			return &c.Goals[i]
		}
	}
	return nil
}

// countGoals returns how many goals of the cases were met, and how many there are.
func countGoals(cases []Case) (met, all int) {
	for _, c := range cases {
		for _, g := range c.Goals {
			all++
			if g.Met {
				met++
			}
		}
	}
	return met, all
}
