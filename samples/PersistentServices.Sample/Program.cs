using System.Globalization;
using System.Text.Json;
using System.Threading.RateLimiting;
using Microsoft.AspNetCore.Diagnostics.HealthChecks;
using Microsoft.AspNetCore.RateLimiting;
using OpenTelemetry.Metrics;
using OpenTelemetry.Resources;
using OpenTelemetry.Trace;
using PersistentServices;
using PersistentServices.Sample;

var builder = WebApplication.CreateBuilder(args);
builder.Services.AddControllers();
builder.Services.AddSingleton<CounterSession>();

// The one thing a service adds: its log directory (keep it on a persistent volume).
// Every option comes from the configuration section PersistentServices (appsettings.json,
// PersistentServices__SessionCheckpointBytes=..., --PersistentServices:...); code can change them after that.
builder.Services.AddPersistentServices();
builder.Services.Configure<PersistentServicesOptions>(options =>
{
    if (string.IsNullOrEmpty(options.LogDirectory))
    {
        options.LogDirectory = Path.Combine(builder.Environment.ContentRootPath, "data", "log");
    }
});

// Session starts per client (docs/capacity.md): a burst of 20, then 5 a second. A client flooding POST /ps/sessions gets
// 429 from here (with Retry-After) long before the service's MaxSessions fills up, so other clients still get sessions.
// The client is its authenticated name, else its address (behind a proxy, add UseForwardedHeaders so this is the
// client's address, not the proxy's).
// Sample:SessionStartBurst and Sample:SessionStartsPerSecond tune it (the recovery benchmark starts 1,000 sessions at once).
var startBurst = builder.Configuration.GetValue("Sample:SessionStartBurst", 20);
var startsPerSecond = builder.Configuration.GetValue("Sample:SessionStartsPerSecond", 5);
builder.Services.AddRateLimiter(limiter =>
{
    limiter.RejectionStatusCode = StatusCodes.Status429TooManyRequests;
    limiter.OnRejected = (context, _) =>
    {
        if (context.Lease.TryGetMetadata(MetadataName.RetryAfter, out var retryAfter))
        {
            context.HttpContext.Response.Headers.RetryAfter = ((int)Math.Ceiling(retryAfter.TotalSeconds)).ToString(CultureInfo.InvariantCulture);
        }

        return ValueTask.CompletedTask;
    };
    limiter.AddPolicy("per-client", context => RateLimitPartition.GetTokenBucketLimiter(
        context.User.Identity is { IsAuthenticated: true, Name: { } name } ? "user:" + name : "ip:" + context.Connection.RemoteIpAddress,
        _ => new TokenBucketRateLimiterOptions
        {
            TokenLimit = startBurst,
            TokensPerPeriod = startsPerSecond,
            ReplenishmentPeriod = TimeSpan.FromSeconds(1),
            QueueLimit = 0,
        }));
});

// Telemetry (docs/telemetry.md): the library's spans and metrics beside ASP.NET Core's. Traces and metrics go over OTLP
// when OTEL_EXPORTER_OTLP_ENDPOINT is set (e.g. http://127.0.0.1:4317), metrics are scraped by Prometheus at /metrics,
// and Sample:ConsoleTelemetry=true prints the spans to the console.
var otlp = !string.IsNullOrEmpty(builder.Configuration["OTEL_EXPORTER_OTLP_ENDPOINT"]);
var consoleTelemetry = builder.Configuration.GetValue("Sample:ConsoleTelemetry", false);
builder.Services.AddOpenTelemetry()
    .ConfigureResource(resource => resource.AddService("PersistentServices.Sample"))
    .WithTracing(tracing =>
    {
        tracing.AddPersistentServicesInstrumentation().AddAspNetCoreInstrumentation();
        if (otlp)
        {
            tracing.AddOtlpExporter();
        }

        if (consoleTelemetry)
        {
            tracing.AddConsoleExporter();
        }
    })
    .WithMetrics(metrics =>
    {
        metrics.AddPersistentServicesInstrumentation().AddAspNetCoreInstrumentation().AddPrometheusExporter();
        if (otlp)
        {
            metrics.AddOtlpExporter();
        }
    });

var app = builder.Build();
app.MapPrometheusScrapingEndpoint();   // GET /metrics: Prometheus' text format
app.UseRateLimiter();
app.UsePersistentServices(sessions => sessions.RequireRateLimiting("per-client"));
app.MapControllers();

// A persistent minimal API and its read-only twin.
app.MapPost("/counter/add", (AddToCounter body, CounterSession counter) => counter.Add(body)).Persistent();   // or [Persistent] on the handler
app.MapGet("/counter", [PersistentReadOnly] (CounterSession counter) => counter.Read());

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
