using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using PersistentServices.Checkpoints;

namespace PersistentServices.AspNetCore.Tests.Hosting;

/// <summary>
/// A crash test arms a point in any application on the library through its configuration (docs/checkpoints.md); the
/// process tests show the kill itself (the test service registers no crash points of its own).
/// </summary>
public sealed class CrashPointConfigurationTests
{
    [Fact]
    public void TheConfigurationsCrashPoint_IsArmed_WithItsHitsToPass()
    {
        var crashPoints = Resolve(new() { [CrashPoints.PointKey] = CrashPoints.RequestLogged, [CrashPoints.AfterKey] = "3" });

        Assert.Equal(CrashPoints.RequestLogged, crashPoints.Armed);
        Assert.Equal(3, crashPoints.HitsToPass);
        Assert.True(crashPoints.IsArmed(CrashPoints.RequestLogged));
        Assert.False(crashPoints.IsArmed(CrashPoints.ReplySent));
    }

    [Fact]
    public void NoCrashPointConfigured_NoneIsArmed()
    {
        Assert.Same(CrashPoints.None, Resolve([]));
    }

    [Fact]
    public void ACrashPointTheTestRegistered_WinsOverTheConfiguration()
    {
        var own = new CrashPoints(CrashPoints.ReplySent);
        Assert.Same(own, Resolve(new() { [CrashPoints.PointKey] = CrashPoints.RequestLogged }, own));
    }

    [Theory]
    [InlineData("-1")]
    [InlineData("two")]
    public void AHitCountThatIsNoCount_IsRefusedWithTheKeysName(string after)
    {
        var error = Assert.Throws<InvalidOperationException>(() =>
            Resolve(new() { [CrashPoints.PointKey] = CrashPoints.RequestLogged, [CrashPoints.AfterKey] = after }));
        Assert.Contains(CrashPoints.AfterKey, error.Message, StringComparison.Ordinal);
    }

    private static CrashPoints Resolve(Dictionary<string, string?> settings, CrashPoints? own = null)
    {
        var services = new ServiceCollection();
        services.AddSingleton<IConfiguration>(new ConfigurationBuilder().AddInMemoryCollection(settings).Build());
        if (own is not null)
        {
            services.AddSingleton(own);
        }

        services.AddPersistentServices(options => options.LogDirectory = Path.GetTempPath());
        using var provider = services.BuildServiceProvider();
        return provider.GetRequiredService<CrashPoints>();
    }
}
