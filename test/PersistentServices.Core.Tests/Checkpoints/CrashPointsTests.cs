using PersistentServices.Checkpoints;
using PersistentServices.Log;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Checkpoints;

/// <summary>Crash points are injected, none armed by default; the library reads no environment for them (issue 33).</summary>
public sealed class CrashPointsTests
{
    [Fact]
    public void None_ArmsNothing_AndAHitReturns()
    {
        Assert.False(CrashPoints.None.IsArmed(CrashPoints.RequestLogged));
        CrashPoints.None.Hit(CrashPoints.RequestLogged); // returns: this test process is still alive
    }

    [Fact]
    public void Armed_OnlyItsOwnPoint_AndAnOtherPointsHitReturns()
    {
        var armed = new CrashPoints(CrashPoints.AnchorWritten, after: 3);

        Assert.True(armed.IsArmed(CrashPoints.AnchorWritten));
        Assert.False(armed.IsArmed(CrashPoints.LogTruncated));
        armed.Hit(CrashPoints.LogTruncated);
        Assert.False(new CrashPoints("").IsArmed(""));
    }

    [Fact]
    public async Task Log_OpenedWithout_HasNoneArmed_OpenedWith_CarriesThem()
    {
        using var dir = new TempDirectory();
        var armed = new CrashPoints(CrashPoints.AnchorWritten);
        await using (var plain = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: TestContext.Current.CancellationToken))
        {
            Assert.Same(CrashPoints.None, plain.CrashPoints);
        }

        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), logger: null, capture: null, metrics: null, armed, TestContext.Current.CancellationToken);
        Assert.Same(armed, log.CrashPoints);
    }
}
