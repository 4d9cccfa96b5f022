using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Mvc.ApplicationParts;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using QuickStart.Controllers;

namespace PersistentServices.Testing.Tests;

/// <summary>The kit's log after a kill -9, checked with the replay check (PersistentServices.AspNetCore) against this build.</summary>
[Collection(InProcessHost.Name)]
public sealed class ReplayCheckWithKitTests
{
    private static CancellationToken Cancel => TestContext.Current.CancellationToken;

    [Fact]
    public async Task TheLogOfACrashedService_ReplaysOnThisBuild()
    {
        using var copies = new TempFolder();
        string copy;
        await using (var app = await PersistentApp.StartAsync<CartController>(cancellationToken: Cancel))
        {
            for (var s = 0; s < 3; s++)
            {
                var session = await app.StartSessionAsync(cancellationToken: Cancel);
                (await session.PostAsync($"/cart/items?sku=book-{s}", cancellationToken: Cancel)).Dispose();
                (await session.PostAsync("/cart/items?sku=pen", cancellationToken: Cancel)).Dispose();
            }

            await app.CrashAsync(Cancel);
            copy = app.CopyLog(Path.Combine(copies.Path, "log"));
        }

        var report = await ReplayCheck.RunAsync(copy, BuildQuickStart, Cancel);

        Assert.True(report.Passed, report.ToString());
        Assert.Equal(3, report.Sessions);
        Assert.Equal(3, report.SessionsReplayedFine);
    }

    /// <summary>What samples/QuickStart/Program.cs builds, without app.Run().</summary>
    private static WebApplication BuildQuickStart()
    {
        var builder = WebApplication.CreateBuilder();
        builder.Logging.ClearProviders();
        builder.Services.AddControllers().ConfigureApplicationPartManager(parts =>
        {
            parts.ApplicationParts.Clear();
            parts.ApplicationParts.Add(new AssemblyPart(typeof(CartController).Assembly));
        });
        builder.Services.AddPersistentServices(o => o.LogDirectory = "unused-the-check-uses-its-sandbox");
        var app = builder.Build();
        app.UsePersistentServices();
        app.MapControllers();
        return app;
    }
}
