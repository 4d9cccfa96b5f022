using System.Text.Json;
using Microsoft.AspNetCore.Diagnostics.HealthChecks;
using PersistentServices;
using PersistentServices.Sample;

var builder = WebApplication.CreateBuilder(args);
builder.Services.AddControllers();
builder.Services.AddSingleton<CounterSession>();

// The one thing a service adds: its log directory (keep it on a persistent volume).
// Every option can also come from configuration (appsettings.json, PersistentServices__SessionCheckpointBytes=..., --PersistentServices:...).
builder.Services.AddPersistentServices(options =>
{
    builder.Configuration.GetSection("PersistentServices").Bind(options);
    if (string.IsNullOrEmpty(options.LogDirectory))
    {
        options.LogDirectory = Path.Combine(builder.Environment.ContentRootPath, "data", "log");
    }
});

var app = builder.Build();
app.UsePersistentServices();
app.MapControllers();

// A persistent minimal API and its read-only twin.
app.MapPost("/counter/add", [Persistent] (AddToCounter body, CounterSession counter) => counter.Add(body));
app.MapGet("/counter", [ReadOnly] (CounterSession counter) => counter.Read());

// A plain endpoint: untouched by PersistentServices.
app.MapGet("/", () => "PersistentServices sample: POST /ps/sessions, then POST /cart/items with PS-Session and PS-Seq headers (see README.md).");

// Readiness: true once the log is open and scanned (recovered sessions may still be replaying).
app.MapHealthChecks("/health/ready", new HealthCheckOptions
{
    Predicate = check => check.Tags.Contains("ready"),
    ResponseWriter = (context, report) =>
    {
        context.Response.ContentType = "application/json";
        return context.Response.WriteAsync(JsonSerializer.Serialize(new
        {
            status = report.Status.ToString(),
            entries = report.Entries.ToDictionary(e => e.Key, e => new { status = e.Value.Status.ToString(), e.Value.Description, e.Value.Data }),
        }));
    },
});

app.Run();
