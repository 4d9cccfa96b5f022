using Microsoft.AspNetCore.Diagnostics.HealthChecks;
using PersistentServices;

var builder = WebApplication.CreateBuilder(args);
builder.Logging.AddSimpleConsole(o => o.TimestampFormat = "HH:mm:ss.fff ");   // each console message starts with its time
builder.Services.AddControllers();

// The log: the service's only storage. Keep it on a persistent volume in production; here ./data/log.
builder.Services.AddPersistentServices(o =>
    o.LogDirectory = builder.Configuration["PersistentServices:LogDirectory"] ?? "data/log");

var app = builder.Build();
app.UsePersistentServices();   // POST /ps/sessions, the session protocol, recovery after a crash

// The library's health checks: "live" fails only when a restart is the cure (a faulted log, a failed recovery; a
// fenced primary demotes itself to a replica and stays live), "ready" while the service should get no traffic (opening
// its log, draining, a replica). A restarter watches the first (docs/operations.md), a load balancer the second.
app.MapHealthChecks("/health/live", new HealthCheckOptions { Predicate = check => check.Tags.Contains("live") });
app.MapHealthChecks("/health/ready", new HealthCheckOptions { Predicate = check => check.Tags.Contains("ready") });
app.MapControllers();
app.Run();
