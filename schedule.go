package s3task

import (
	"fmt"
	"time"
)

// Schedule says when a periodic task runs: at the start of each of its
// periods. Make one with [Every], [Daily] or [Weekly]; the zero Schedule
// is invalid. Every process computes the same periods from the same
// Schedule (and, for Daily and Weekly, the same time zone database), so
// the start of a period names its run everywhere.
type Schedule struct {
	kind         scheduleKind
	every        time.Duration  // Every
	hour, minute int            // Daily, Weekly
	day          time.Weekday   // Weekly
	loc          *time.Location // Daily, Weekly
}

// scheduleKind tells the constructors' Schedules apart.
type scheduleKind uint8

const (
	noSchedule scheduleKind = iota
	everySchedule
	dailySchedule
	weeklySchedule
)

// MinPeriod is the shortest period of a Schedule made by [Every].
const MinPeriod = time.Minute

// Every returns a Schedule whose periods last d, a whole number of seconds
// of at least [MinPeriod]. The periods are aligned to multiples of d since
// Go's zero time, by the S3 server's clock: a d that divides a day starts a
// period at midnight UTC.
func Every(d time.Duration) Schedule { return Schedule{kind: everySchedule, every: d} }

// Daily returns a Schedule whose periods start every day at hour:minute
// in loc (nil means UTC). On a day when that time does not exist, or
// happens twice (a daylight saving change), the period starts at the one
// instant Go's time.Date gives for it: once a day, always.
func Daily(hour, minute int, loc *time.Location) Schedule {
	return Schedule{kind: dailySchedule, hour: hour, minute: minute, loc: loc}
}

// Weekly returns a Schedule whose periods start every week on day at
// hour:minute in loc (nil means UTC), as Daily on that day.
func Weekly(day time.Weekday, hour, minute int, loc *time.Location) Schedule {
	return Schedule{kind: weeklySchedule, hour: hour, minute: minute, day: day, loc: loc}
}

// validate reports what makes s unusable, if anything.
func (s Schedule) validate() error {
	switch {
	case s.kind == noSchedule:
		return fmt.Errorf("no schedule: make one with Every, Daily or Weekly")
	case s.kind == everySchedule:
		if s.every < MinPeriod || s.every%time.Second != 0 {
			return fmt.Errorf("every %s: a period is a whole number of seconds, at least %s", s.every, MinPeriod)
		}
	case s.hour < 0 || s.hour > 23 || s.minute < 0 || s.minute > 59:
		return fmt.Errorf("at %d:%d: the hour is 0 to 23 and the minute 0 to 59", s.hour, s.minute)
	case s.kind == weeklySchedule && (s.day < time.Sunday || s.day > time.Saturday):
		return fmt.Errorf("weekly on day %d: not a weekday", s.day)
	}
	return nil
}

// IsZero reports whether s is the zero Schedule, which names no periods.
func (s Schedule) IsZero() bool { return s.kind == noSchedule }

func (s Schedule) location() *time.Location {
	if s.loc == nil {
		return time.UTC
	}
	return s.loc
}

// Prev returns the start of the latest period that starts at or before t;
// the zero time for the zero Schedule.
func (s Schedule) Prev(t time.Time) time.Time {
	if s.IsZero() {
		return time.Time{}
	}
	if s.kind == everySchedule {
		return t.UTC().Truncate(s.every)
	}
	loc := s.location()
	lt := t.In(loc)
	back := 0
	if s.kind == weeklySchedule {
		back = (int(lt.Weekday()) - int(s.day) + 7) % 7
	}
	start := s.on(lt, -back)
	if start.After(t) {
		step := 1
		if s.kind == weeklySchedule {
			step = 7
		}
		start = s.on(lt, -back-step)
	}
	return start.UTC()
}

// Next returns the start of the first period that starts after t; the
// zero time for the zero Schedule.
func (s Schedule) Next(t time.Time) time.Time {
	if s.IsZero() {
		return time.Time{}
	}
	if s.kind == everySchedule {
		return t.UTC().Truncate(s.every).Add(s.every)
	}
	loc := s.location()
	lt := t.In(loc)
	ahead := 0
	if s.kind == weeklySchedule {
		ahead = (int(s.day) - int(lt.Weekday()) + 7) % 7
	}
	start := s.on(lt, ahead)
	if !start.After(t) {
		step := 1
		if s.kind == weeklySchedule {
			step = 7
		}
		start = s.on(lt, ahead+step)
	}
	return start.UTC()
}

// on returns the schedule's time of day on the local date of lt moved by
// days.
func (s Schedule) on(lt time.Time, days int) time.Time {
	y, m, d := lt.Date()
	return time.Date(y, m, d+days, s.hour, s.minute, 0, 0, lt.Location())
}

// String describes s: "every 5m0s", "daily at 02:00 Europe/Berlin",
// "weekly on Monday at 06:30 UTC".
func (s Schedule) String() string {
	switch {
	case s.IsZero():
		return "no schedule"
	case s.kind == everySchedule:
		return "every " + s.every.String()
	case s.kind == weeklySchedule:
		return fmt.Sprintf("weekly on %s at %02d:%02d %s", s.day, s.hour, s.minute, s.location())
	}
	return fmt.Sprintf("daily at %02d:%02d %s", s.hour, s.minute, s.location())
}
