using System.Net;
using FASTER.core;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Diagnostics.HealthChecks;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Log;

namespace PersistentServices.AspNetCore.Tests.Diagnostics;

/// <summary>
/// The two health checks as a Kubernetes deployment maps them (docs/operations.md, "Health checks and Kubernetes probes"):
/// readiness (tag <c>ready</c>) holds traffic back while the service drains or cannot serve; liveness (tag <c>live</c>)
/// restarts the process only for a faulted log or a failed recovery. The test app also maps <c>/health/ready</c> without
/// a predicate (every check), as the README's quick start does.
/// </summary>
public sealed class HealthCheckTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task Draining_IsNotReady_ButLive()
    {
        await using var server = await StartAsync();
        Assert.Equal(HttpStatusCode.OK, await StatusAsync(server, "/health/readiness"));
        Assert.Equal(HttpStatusCode.OK, await StatusAsync(server, "/health/live"));

        server.Availability.BeginDrain();

        Assert.Equal(HttpStatusCode.ServiceUnavailable, await StatusAsync(server, "/health/readiness"));
        Assert.Equal(HttpStatusCode.OK, await StatusAsync(server, "/health/live"));
        Assert.Equal(HttpStatusCode.ServiceUnavailable, await StatusAsync(server, "/health/ready")); // no predicate: every check, the worst wins
    }

    [Fact]
    public async Task FaultedLog_IsNeitherReadyNorLive()
    {
        var full = new FullDisk();
        await using var server = await StartAsync(o => o.Log.DeviceFactory = (basePath, io) => new FullDiskDevice(DurableLog.CreateDefaultDevice(basePath, io), full));
        var session = await server.StartSessionAsync();
        Assert.Equal(HttpStatusCode.OK, (await server.SendAsync(HttpMethod.Post, "/counter/add", session, 1, new { opId = "a", amount = 1 })).Response.StatusCode);
        Assert.Equal(HttpStatusCode.OK, await StatusAsync(server, "/health/live"));

        full.IsFull = true;
        var (refused, _) = await server.SendAsync(HttpMethod.Post, "/counter/add", session, 2, new { opId = "b", amount = 1 });
        Assert.Equal(HttpStatusCode.ServiceUnavailable, refused.StatusCode);
        Assert.NotNull(server.Availability.LogFault);

        Assert.Equal(HttpStatusCode.ServiceUnavailable, await StatusAsync(server, "/health/live"));
        Assert.Equal(HttpStatusCode.ServiceUnavailable, await StatusAsync(server, "/health/readiness"));
        Assert.Equal(HttpStatusCode.ServiceUnavailable, await StatusAsync(server, "/health/ready"));
    }

    private Task<TestServer> StartAsync(Action<PersistentServicesOptions>? configure = null)
        => TestServer.StartAsync(_dir.Path, configure, beforePersistentServices: app =>
        {
            app.MapHealthChecks("/health/live", new HealthCheckOptions { Predicate = check => check.Tags.Contains("live") });
            app.MapHealthChecks("/health/readiness", new HealthCheckOptions { Predicate = check => check.Tags.Contains("ready") });
        });

    private static async Task<HttpStatusCode> StatusAsync(TestServer server, string path)
    {
        using var response = await server.Client.GetAsync(path, Ct);
        return response.StatusCode;
    }

    private sealed class FullDisk
    {
        public volatile bool IsFull;
    }

    /// <summary>Fails every write with ENOSPC once the disk is full.</summary>
    private sealed class FullDiskDevice(IDevice inner, FullDisk disk) : DelegatingDevice(inner)
    {
        private const uint Enospc = 28;

        public override void WriteAsync(IntPtr sourceAddress, int segmentId, ulong destinationAddress, uint numBytesToWrite, DeviceIOCompletionCallback callback, object context)
        {
            if (disk.IsFull)
            {
                callback(Enospc, 0, context);
                return;
            }

            base.WriteAsync(sourceAddress, segmentId, destinationAddress, numBytesToWrite, callback, context);
        }
    }
}
