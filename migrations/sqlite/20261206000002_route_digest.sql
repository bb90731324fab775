-- The digest of the routes that chose an event's jobs (RouteTable::digest). The reconciler
-- routes again the events whose digest is not the current one: those another configuration
-- routed during a change of routes. NULL for events stored before routes existed.
ALTER TABLE events ADD COLUMN route_digest INTEGER;
