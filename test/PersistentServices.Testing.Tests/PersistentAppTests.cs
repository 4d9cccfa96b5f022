using System.Net;
using QuickStart.Controllers;

namespace PersistentServices.Testing.Tests;

/// <summary>The test kit against the quick start's service, as a user's test would use it.</summary>
public sealed class PersistentAppTests
{
    private static CancellationToken Cancel => TestContext.Current.CancellationToken;

    [Fact]
    public async Task CrashAndRestart_AcknowledgedRequestsSurvive_AndARetryIsNotRunAgain()
    {
        await using var app = await PersistentApp.StartAsync<CartController>(cancellationToken: Cancel);
        var session = await app.StartSessionAsync(cancellationToken: Cancel);
        using (var book = await session.PostAsync("/cart/items?sku=book", cancellationToken: Cancel))
        {
            Assert.Equal(HttpStatusCode.OK, book.StatusCode);
        }

        using var pen = await session.PostAsync("/cart/items?sku=pen", cancellationToken: Cancel);
        var penBody = await pen.Content.ReadAsStringAsync(Cancel);
        Assert.Equal("""{"items":["book","pen"],"itemsAdded":2}""", penBody);
        var firstProcess = app.ProcessId;

        await app.CrashAsync(Cancel);
        Assert.Null(app.ProcessId);
        await Assert.ThrowsAsync<HttpRequestException>(() => app.HttpClient.GetAsync(new Uri("/cart/stats", UriKind.Relative), Cancel));
        await app.RestartAsync(Cancel);
        Assert.NotEqual(firstProcess, app.ProcessId);

        using var retry = await session.ResendAsync(Cancel);
        Assert.Equal(HttpStatusCode.OK, retry.StatusCode);
        Assert.Equal("true", retry.Headers.GetValues("PS-Replayed").Single());
        Assert.Equal(penBody, await retry.Content.ReadAsStringAsync(Cancel));

        using var cart = await session.GetAsync("/cart", Cancel);
        Assert.Equal("""{"items":["book","pen"]}""", await cart.Content.ReadAsStringAsync(Cancel));
        Assert.Equal("""{"itemsAdded":2}""", await app.HttpClient.GetStringAsync(new Uri("/cart/stats", UriKind.Relative), Cancel));
    }

    [Fact]
    public async Task ARequestSentWhileTheServiceIsDown_ResentAfterTheRestart_RunsOnce()
    {
        await using var app = await PersistentApp.StartAsync<CartController>(cancellationToken: Cancel);
        var session = await app.StartSessionAsync(cancellationToken: Cancel);
        (await session.PostAsync("/cart/items?sku=book", cancellationToken: Cancel)).Dispose();
        await app.CrashAsync(Cancel);

        await Assert.ThrowsAsync<HttpRequestException>(() => session.PostAsync("/cart/items?sku=pen", cancellationToken: Cancel));
        Assert.Equal(2, session.LastSequence);
        await app.RestartAsync(Cancel);

        using var resent = await session.ResendAsync(Cancel);
        Assert.Equal(HttpStatusCode.OK, resent.StatusCode);
        Assert.False(resent.Headers.Contains("PS-Replayed"), "the request never reached the service: it runs now");
        Assert.Equal("""{"items":["book","pen"],"itemsAdded":2}""", await resent.Content.ReadAsStringAsync(Cancel));
        using var again = await session.ResendAsync(Cancel);
        Assert.Equal("true", again.Headers.GetValues("PS-Replayed").Single());
        Assert.Equal("""{"itemsAdded":2}""", await app.HttpClient.GetStringAsync(new Uri("/cart/stats", UriKind.Relative), Cancel));
    }

    [Fact]
    public async Task StopAsync_StopsGracefully_AndTheStateIsThereAfterTheRestart()
    {
        await using var app = await PersistentApp.StartAsync<CartController>(cancellationToken: Cancel);
        var session = await app.StartSessionAsync(cancellationToken: Cancel);
        (await session.PostAsync("/cart/items?sku=book", cancellationToken: Cancel)).Dispose();

        Assert.Equal(0, await app.StopAsync(Cancel));
        await app.RestartAsync(Cancel);

        using var cart = await session.GetAsync("/cart", Cancel);
        Assert.Equal("""{"items":["book"]}""", await cart.Content.ReadAsStringAsync(Cancel));
    }

    [Fact]
    public async Task DisposeAsync_DeletesTheTemporaryLog_ButKeepsAGivenOne()
    {
        string temporary;
        await using (var app = await PersistentApp.StartAsync<CartController>(cancellationToken: Cancel))
        {
            temporary = app.LogDirectory;
            Assert.NotEmpty(Directory.EnumerateFileSystemEntries(temporary));
        }

        Assert.False(Directory.Exists(temporary));

        using var given = new TempFolder();
        await using (var app = await PersistentApp.StartAsync<CartController>(o => o.LogDirectory = given.Path, Cancel))
        {
            Assert.Equal(given.Path, app.LogDirectory);
        }

        Assert.NotEmpty(Directory.EnumerateFileSystemEntries(given.Path));
    }

    [Fact]
    public async Task StartAsync_InvalidOptions_AreRefusedBeforeAnythingStarts()
    {
        await Assert.ThrowsAsync<ArgumentException>(() => PersistentApp.StartAsync(new PersistentAppOptions(), Cancel));
        await Assert.ThrowsAsync<ArgumentException>(() => PersistentApp.StartAsync(new PersistentAppOptions { AppPath = "/nonexistent/App.dll" }, Cancel));
        var library = typeof(PersistentApp).Assembly.Location;   // a library: no .runtimeconfig.json
        var notAnApp = await Assert.ThrowsAsync<ArgumentException>(() => PersistentApp.StartAsync(new PersistentAppOptions { AppPath = library }, Cancel));
        Assert.Contains("runtimeconfig", notAnApp.Message, StringComparison.Ordinal);
        await Assert.ThrowsAsync<ArgumentException>(() => PersistentApp.StartAsync<CartController>(o => o.ReadinessPath = "health", Cancel));
    }

    [Fact]
    public async Task CopyLog_WhileRunning_IsRefused_AfterACrash_IsAVerifiableCopy()
    {
        await using var app = await PersistentApp.StartAsync<CartController>(cancellationToken: Cancel);
        var session = await app.StartSessionAsync(cancellationToken: Cancel);
        (await session.PostAsync("/cart/items?sku=book", cancellationToken: Cancel)).Dispose();
        using var copy = new TempFolder();
        Assert.Throws<InvalidOperationException>(() => app.CopyLog(Path.Combine(copy.Path, "log")));

        await app.CrashAsync(Cancel);
        var copied = app.CopyLog(Path.Combine(copy.Path, "log"));

        // The copy is a log the same service recovers: start a second instance on it.
        await using var second = await PersistentApp.StartAsync<CartController>(o => o.LogDirectory = copied, Cancel);
        Assert.Equal("""{"itemsAdded":1}""", await second.HttpClient.GetStringAsync(new Uri("/cart/stats", UriKind.Relative), Cancel));
    }
}
