using PersistentServices.Log;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Log;

public sealed class CommitMetadataFileTests
{
    [Fact]
    public void Write_AlternatesSlots_ReadReturnsNewest()
    {
        using var dir = new TempDirectory();
        var path = dir.Combine(CommitMetadataFile.FileName);
        using (var file = CommitMetadataFile.Create(path, new CommitMetadata(0, 64, 64, 0)))
        {
            file.Write(64, 1000, 5);
            file.Write(64, 2000, 9);
        }

        var (newest, damage) = CommitMetadataFile.Read(path);

        Assert.Empty(damage);
        Assert.Equal(new CommitMetadata(3, 64, 2000, 9), newest);
    }

    [Fact]
    public void Read_NewestSlotTorn_FallsBackToTheOtherSlotAndReportsDamage()
    {
        using var dir = new TempDirectory();
        var path = dir.Combine(CommitMetadataFile.FileName);
        using (var file = CommitMetadataFile.Create(path, new CommitMetadata(0, 64, 64, 0)))
        {
            file.Write(64, 1000, 5); // sequence 2, slot 1
        }

        var bytes = File.ReadAllBytes(path);
        bytes[512 + 30] ^= 0x40;
        File.WriteAllBytes(path, bytes);

        var (newest, damage) = CommitMetadataFile.Read(path);

        Assert.Equal(new CommitMetadata(1, 64, 64, 0), newest);
        Assert.Contains(damage, d => d.Contains("slot 1", StringComparison.Ordinal));
    }

    [Fact]
    public void Write_RecordsTheGeometry_ReadReturnsIt()
    {
        using var dir = new TempDirectory();
        var path = dir.Combine(CommitMetadataFile.FileName);
        using (var file = CommitMetadataFile.Create(path, new CommitMetadata(0, 64, 64, 0, 22, 30)))
        {
            file.Write(64, 4096, 3);
        }

        var (newest, _) = CommitMetadataFile.Read(path);

        Assert.Equal(new CommitMetadata(2, 64, 4096, 3, 22, 30), newest);
    }

    [Fact]
    public void Read_SlotOfTheFirstBuild_GeometryUnknown()
    {
        // The checked-in log's metadata was written before bytes 6-7 held the geometry (they were reserved, zero).
        var (newest, damage) = CommitMetadataFile.Read(Path.Combine(AppContext.BaseDirectory, "Fixtures", "log-v1", CommitMetadataFile.FileName));

        Assert.Empty(damage);
        Assert.Equal(0, newest!.Value.PageSizeBits);
        Assert.Equal(0, newest.Value.SegmentSizeBits);
    }

    [Fact]
    public void Read_MissingFile_ReturnsNothing()
    {
        using var dir = new TempDirectory();

        var (newest, damage) = CommitMetadataFile.Read(dir.Combine("absent"));

        Assert.Null(newest);
        Assert.Empty(damage);
    }
}
