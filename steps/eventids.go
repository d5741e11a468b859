package steps

import "fmt"

// eventID is the id of the event a step names, as the team's outbox holds
// it (EventIDs). Two names that give one id would be one event to the
// system yet two to the scenario: an error naming both.
func (e *Env) eventID(name string) (string, error) {
	id := e.EventIDs.ID(name)
	if e.idNames == nil {
		e.idNames = map[string]string{}
	}
	if other, ok := e.idNames[id]; ok && other != name {
		return "", fmt.Errorf("events %s and %s both get id %s in %s (%s): name them apart (a number at the end of the name is the id)", other, name, id, e.EventIDs.Column, e.EventIDs.Type)
	}
	e.idNames[id] = name
	return id, nil
}

// showEvent is an event as the trace shows it: its name, and the id it
// maps to when that differs (bus-1 (= e932ed03-…)).
func showEvent(name, id string) string {
	if name == id {
		return name
	}
	return fmt.Sprintf("%s (= %s)", name, id)
}
