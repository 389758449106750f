// Package hidden is internal: its changes are not the API's.
package hidden
