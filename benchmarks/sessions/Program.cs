using System.Globalization;
using System.Text;
using System.Threading.RateLimiting;
using Microsoft.AspNetCore.RateLimiting;
using PersistentServices;

var builder = WebApplication.CreateBuilder(args);
builder.Services.AddPersistentServices(options =>
    options.LogDirectory = builder.Configuration["LogDirectory"] ?? Path.Combine(builder.Environment.ContentRootPath, "data", "log"));
builder.Services.Configure<PersistentServicesOptions>(builder.Configuration.GetSection("PersistentServices"));

var perClient = builder.Configuration["PerClientRateLimit"] == "true";
if (perClient)
{
    // docs/capacity.md, "Rate limiting the session endpoints"
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
            _ => new TokenBucketRateLimiterOptions { TokenLimit = 20, TokensPerPeriod = 5, ReplenishmentPeriod = TimeSpan.FromSeconds(1), QueueLimit = 0 }));
    });
}

var app = builder.Build();
if (perClient)
{
    app.UseRateLimiter();
    app.UsePersistentServices(sessions => sessions.RequireRateLimiting("per-client"));
}
else
{
    app.UsePersistentServices();
}

// A catalog listing: a page of `size` bytes of JSON-ish text, the same for the same page number.
app.MapPost("/catalog/page", [Persistent] (PageRequest request) => Results.Bytes(Catalog.Page(request.Page, request.Size), "application/json"));

// For the measurements only: the managed heap, before and after a full collection.
app.MapGet("/diag/memory", (bool? collect) =>
{
    if (collect == true)
    {
        GC.Collect(2, GCCollectionMode.Forced, blocking: true, compacting: true);
        GC.WaitForPendingFinalizers();
        GC.Collect(2, GCCollectionMode.Forced, blocking: true, compacting: true);
    }

    var info = GC.GetGCMemoryInfo();
    return Results.Ok(new { heap = GC.GetTotalMemory(false), committed = info.TotalCommittedBytes, available = info.TotalAvailableMemoryBytes });
});
app.MapHealthChecks("/health");
app.MapHealthChecks("/health/detail", new Microsoft.AspNetCore.Diagnostics.HealthChecks.HealthCheckOptions
{
    ResponseWriter = (context, report) => context.Response.WriteAsJsonAsync(report.Entries.ToDictionary(e => e.Key, e => new { status = e.Value.Status.ToString(), e.Value.Description, e.Value.Data })),
});
app.Run();

internal sealed record PageRequest(int Page, int Size);

internal static class Catalog
{
    public static byte[] Page(int page, int size)
    {
        var text = new StringBuilder(size + 100);
        text.Append("{\"page\":").Append(page).Append(",\"items\":[");
        for (var i = 0; text.Length < size - 64; i++)
        {
            text.Append("{\"sku\":\"p").Append(page).Append('-').Append(i).Append("\",\"price\":").Append((page * 31 + i * 7) % 1000).Append("},");
        }

        text.Append("{}]}");
        return Encoding.UTF8.GetBytes(text.ToString().PadRight(size));
    }
}
