using System.Collections.Concurrent;
using FASTER.core;
using PersistentServices;
using PersistentServices.Log;
using PersistentServices.SharedState;

// Configured by environment variables (the tests start it as a child process on 127.0.0.1):
//   PS_LOG_DIR               log directory (required)
//   PS_REPLAY_PARALLELISM    PersistentServicesOptions.ReplayParallelism
//   PS_FAULT_FILE            while this file exists, every log write fails as on a full disk (ENOSPC)
//   PS_NOTIFY_FILE           /notify appends a line here from its Response.OnCompleted callback
//   PS_BLOCK_CHAIN           "1": /chain blocks inside its first update (a crash point for the tests)
var builder = WebApplication.CreateBuilder(args);
builder.Logging.SetMinimumLevel(LogLevel.Information);
var faultFile = Environment.GetEnvironmentVariable("PS_FAULT_FILE");
builder.Services.AddPersistentServices(options =>
{
    options.LogDirectory = Environment.GetEnvironmentVariable("PS_LOG_DIR") ?? throw new InvalidOperationException("PS_LOG_DIR is required");
    if (Environment.GetEnvironmentVariable("PS_REPLAY_PARALLELISM") is { Length: > 0 } parallelism)
    {
        options.ReplayParallelism = int.Parse(parallelism, System.Globalization.CultureInfo.InvariantCulture);
    }

    if (faultFile is { Length: > 0 })
    {
        options.Log.DeviceFactory = (basePath, io) => new FullDiskDevice(DurableLog.CreateDefaultDevice(basePath, io), faultFile);
    }
});

var app = builder.Build();
app.UsePersistentServices();

var balances = new SharedMap<string, long>("Test.Balances");
var accounts = new SharedVariable<string[]>("Test.Accounts");

// Deposits into shared balances; the read-only twin shows them.
app.MapPost("/deposit", [Persistent] (Deposit body) =>
{
    accounts.Update(known => known is null ? [body.Account] : known.Contains(body.Account) ? known : [.. known, body.Account]);
    return Results.Ok(new { account = body.Account, balance = balances.Update(body.Account, b => b + body.Amount) });
});
app.MapGet("/balances", [ReadOnly] () => Results.Ok((accounts.Read() ?? []).ToDictionary(a => a, balances.Get)));

// A reply whose OnStarting callback throws: an endpoint failure (500), like plain ASP.NET Core.
app.MapPost("/onstarting-throws", [Persistent] (HttpContext context) =>
{
    context.Response.OnStarting(() => throw new InvalidOperationException("OnStarting callback failed"));
    return Results.Ok(new { ok = true });
});

// Appends a notification line after its reply went to the client.
var notifyFile = Environment.GetEnvironmentVariable("PS_NOTIFY_FILE");
app.MapPost("/notify", [Persistent] (HttpContext context, Note body) =>
{
    context.Response.OnCompleted(() =>
    {
        if (notifyFile is { Length: > 0 })
        {
            File.AppendAllText(notifyFile, body.Text + "\n");
        }

        return Task.CompletedTask;
    });
    return Results.Ok(new { text = body.Text });
});

// An OnCompleted callback that throws: harmless live, and never stops recovery.
app.MapPost("/oncompleted-throws", [Persistent] (HttpContext context) =>
{
    context.Response.OnCompleted(() => throw new InvalidOperationException("OnCompleted callback failed"));
    return Results.Ok(new { ok = true });
});

// Chained shared updates: update 'from', then update 'to'. With PS_BLOCK_CHAIN=1 it blocks inside the first update
// (its read for update is logged, its write is not: it holds the variable) until the process is killed.
var blockChain = Environment.GetEnvironmentVariable("PS_BLOCK_CHAIN") == "1";
var blocked = new ConcurrentDictionary<string, bool>();
app.MapPost("/chain", [Persistent] (Chain body) =>
{
    var from = new SharedVariable<long>("Test.Chain." + body.From);
    var to = new SharedVariable<long>("Test.Chain." + body.To);
    var a = from.Update(v =>
    {
        if (blockChain)
        {
            blocked[body.From] = true;
            Thread.Sleep(Timeout.Infinite);
        }

        return v + 1;
    });
    var b = to.Update(v => v + 10);
    return Results.Ok(new { from = a, to = b });
});
app.MapGet("/chain/blocked", () => Results.Ok(blocked.Count));
app.MapGet("/chain/values", [ReadOnly] () => Results.Ok(new[] { "x", "y", "z", "w" }.ToDictionary(n => n, n => new SharedVariable<long>("Test.Chain." + n).Read())));

app.MapHealthChecks("/health/ready");
app.Run();

internal sealed record Deposit(string Account, long Amount);

internal sealed record Note(string Text);

internal sealed record Chain(string From, string To);

/// <summary>A log device that fails every write with ENOSPC while a trigger file exists (a disk that filled up).</summary>
internal sealed class FullDiskDevice(IDevice inner, string triggerFile) : DelegatingDevice(inner)
{
    private const uint Enospc = 28;

    public override void WriteAsync(IntPtr sourceAddress, int segmentId, ulong destinationAddress, uint numBytesToWrite, DeviceIOCompletionCallback callback, object context)
    {
        if (File.Exists(triggerFile))
        {
            callback(Enospc, 0, context);
            return;
        }

        base.WriteAsync(sourceAddress, segmentId, destinationAddress, numBytesToWrite, callback, context);
    }
}
